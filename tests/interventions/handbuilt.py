"""Attention LMs whose weights implement AR retrieval by hand (RMSNorm, no MLP, one head).

Residual stream layout (d = 2V + T): [tok: V | prev: V | pos: T], every block one-hot.
    layer 0, previous-token head: at t attends to t-1 (query = pos(t-1), key = pos(s)) and writes
             the token it finds into `prev`;
    layer 1, match-and-copy head: at t attends to the position s whose `prev` equals tok(t) (for the
             query key: the value after that key in context) and writes that token into `tok`, with
             weight COPY, so the tied head predicts it.
`induction_lm` is these two layers. `query_retrieval_lm` adds an inert third layer: the answer is
already at the query position when entering the last layer (direct retrieval by the readout).
"""

from __future__ import annotations

import math

import torch

from mecheval.models.lm import LM, build_model

SCORE = 30.0  # the attention logit of a match (a non-match scores 0)
COPY = 3.0  # weight of the copied token relative to the current token
HEAD_GAIN = 3.0  # final RMSNorm gain: sharpens the output distribution


def _one_hot_tokens(lm: LM, tok: slice, vocab: int) -> None:
    """Zeroes every parameter, embeds token i as exactly the one-hot e_i in the `tok` slice and sets every
    norm's gain to 1. The LM may scale token embeddings (E[x] * c) while its tied head reads E unscaled:
    c is measured, and the final norm gives the head the factor back (times HEAD_GAIN)."""
    for p in lm.parameters():
        p.zero_()
    eye = torch.eye(vocab)
    lm.embed.weight[:, tok] = eye
    c = float(lm.embed_tokens(torch.zeros(1, 1, dtype=torch.long))[0, 0, 0])
    lm.embed.weight[:, tok] = eye / c
    lm.norm_f.weight.fill_(HEAD_GAIN * c)
    for block in lm.layers:
        block.norm1.weight.fill_(1.0)
        if hasattr(block.mixer, "o_norm"):
            block.mixer.o_norm.weight.fill_(1.0)


def _build(vocab: int, seq_len: int, n_layers: int) -> LM:
    d = 2 * vocab + seq_len
    lm = build_model(
        dict(vocab_size=vocab, d_model=d, n_layers=n_layers, mixer="attention", mlp=False,
             norm="rmsnorm", pos_emb="learned", max_len=seq_len)
    )
    tok, prev, pos = slice(0, vocab), slice(vocab, 2 * vocab), slice(2 * vocab, d)
    eye_v, eye_t = torch.eye(vocab), torch.eye(seq_len)
    with torch.no_grad():
        _one_hot_tokens(lm, tok, vocab)
        lm.pos.weight[:, pos] = eye_t

        # Layer 0 input has norm^2 = 2 (tok + pos): RMSNorm scales it by s0 = sqrt(d / 2).
        s0 = math.sqrt(d / 2)
        wq, wk, wv = lm.layers[0].mixer.qkv.weight.split(d)
        wq[pos, pos] = torch.diag(torch.ones(seq_len - 1), 1) * SCORE * math.sqrt(d) / s0**2  # pos t -> pos t-1
        wk[pos, pos] = eye_t
        wv[prev, tok] = eye_v / s0
        lm.layers[0].mixer.out.weight[prev, prev] = eye_v

        # Layer 1 input has norm^2 = 3 (tok + prev + pos): scale s1 = sqrt(d / 3).
        s1 = math.sqrt(d / 3)
        wq, wk, wv = lm.layers[1].mixer.qkv.weight.split(d)
        wq[prev, tok] = eye_v * SCORE * math.sqrt(d) / s1**2  # match tok(t) ...
        wk[prev, prev] = eye_v  # ... against prev(s)
        wv[tok, tok] = eye_v * COPY / s1
        lm.layers[1].mixer.out.weight[tok, tok] = eye_v
    return lm.eval()


def induction_lm(vocab: int, seq_len: int) -> LM:
    """2 layers: previous-token head, then match-and-copy head (the answer is read at the value)."""
    return _build(vocab, seq_len, 2)


def query_retrieval_lm(vocab: int, seq_len: int) -> LM:
    """3 layers, the last inert: the answer sits at the query position before the last layer."""
    return _build(vocab, seq_len, 3)


def key_readout(lm: LM, task, batch):
    """The verdict's readout of a hand-built model: key corrupted, key / value / query patched at every block input."""
    from mecheval.interventions import interchange

    return interchange(lm, task, batch, "key", ["resid_pre"], ["key", "value", "query"], seed=3)


CONV_GAIN = 20.0  # input scale of the hand-built DeltaNet's q/k/v (SiLU of it is nearly linear and one-hot)


def conv_binding_lm(vocab: int, n_layers: int = 2) -> LM:
    """DeltaNet LM whose last layer binds key and value inside its short conv window (kernel 2).

    The residual carries the token one-hot (no positions); earlier layers write nothing. In the last
    layer the conv gives q_t = tok(t), k_t = tok(t−1), v_t = tok(t): at the value position (key + 1)
    the delta rule writes the row key -> value, and at the query q = the query key reads the value
    back (β = 1). Nothing is stored in the residual at the value position: the association exists only
    in the conv output at key + 1.
    """
    d = vocab
    lm = build_model(dict(vocab_size=vocab, d_model=d, n_layers=n_layers, mixer="deltanet", d_conv=2, mlp=False,
                          norm="rmsnorm", max_len=64))
    eye = torch.eye(d)
    with torch.no_grad():
        _one_hot_tokens(lm, slice(0, d), d)
        last = lm.layers[-1].mixer
        s = d**-0.5  # RMSNorm maps a one-hot to sqrt(d) times it
        last.qkv.weight.copy_(torch.cat([eye, eye, eye]) * CONV_GAIN * s)
        w = last.conv.weight  # [3d, 1, 2]; tap 1 = lag 0, tap 0 = lag 1
        w[:d, 0, 1] = 1.0  # q: tok(t)
        w[d : 2 * d, 0, 0] = 1.0  # k: tok(t - 1)
        w[2 * d :, 0, 1] = 1.0  # v: tok(t)
        last.b_proj.weight.fill_(CONV_GAIN * s)  # β = sigmoid(CONV_GAIN) ≈ 1
        last.o_proj.weight.copy_(eye * COPY * s)
    return lm.eval()


def carried_key_lm(vocab: int) -> LM:
    """2-layer DeltaNet LM whose key reaches the read point (layer 1's input) only two positions later, at
    value + 1: the published cells (key, value, query) miss it.

    Residual layout (d = 2V): [tok: V | lag2: V]. Layer 0 writes tok(t − 2) into `lag2` (constant q and k,
    so S holds the last v, and v = tok two positions back through its conv of kernel 3). Layer 1 (conv of
    kernel 3) binds k_t = lag2(t) to v_t = tok(t − 1): at value + 1 the row key -> value; the query's
    q = tok(query) reads the value back. Corrupting the key changes the read point at the key (which layer 1
    only uses as a value for another row) and at value + 1 (which alone carries it to the answer).
    """
    V, d = vocab, 2 * vocab
    lm = build_model(dict(vocab_size=vocab, d_model=d, n_layers=2, mixer="deltanet", d_conv=3, mlp=False,
                          norm="rmsnorm", max_len=64))
    tok, lag2 = slice(0, V), slice(V, d)
    eye = torch.eye(V)
    with torch.no_grad():
        _one_hot_tokens(lm, tok, V)
        s = d**-0.5
        for block in lm.layers:
            block.mixer.b_proj.weight.fill_(CONV_GAIN * s)  # β ≈ 1: each write replaces the row
        first, last = lm.layers[0].mixer, lm.layers[1].mixer
        wq, wk, wv = first.qkv.weight.split(d)  # [d, d] each: channels <- residual
        wq[0, tok] = wk[0, tok] = CONV_GAIN * s  # q = k = e0 at every token
        wv[tok, tok] = eye * CONV_GAIN * s
        w = first.conv.weight  # [3d, 1, 3]; tap 2 = lag 0, tap 0 = lag 2
        w[: 2 * d, 0, 2] = 1.0
        w[2 * d :, 0, 0] = 1.0
        first.o_proj.weight[lag2, tok] = eye * s
        wq, wk, wv = last.qkv.weight.split(d)
        wq[tok, tok] = eye * CONV_GAIN * s  # q = tok(t)
        wk[tok, lag2] = eye * CONV_GAIN * s  # k = lag2(t) = tok(t - 2)
        wv[tok, tok] = eye * CONV_GAIN * s  # v = tok(t - 1) through the conv
        w = last.conv.weight
        w[: 2 * d, 0, 2] = 1.0
        w[2 * d :, 0, 1] = 1.0
        last.o_proj.weight[tok, tok] = eye * COPY * s
    return lm.eval()


def pointer_lm(vocab: int, seq_len: int) -> LM:
    """2 attention layers that retrieve by position: the query carries *where* the value is, not the value.

    Residual layout (d = V + 2T): [tok: V | ptr: T | pos: T]. Layer 0 at t attends to the earlier position
    s holding tok(t) (a match scores SCORE, t itself −SCORE) and writes the pointer pos(s + 1) into `ptr`;
    layer 1 at t attends to the position `ptr(t)` names and copies its token into `tok`. The published
    readout reads direct retrieval (the clean query restores the answer); moving the queried pair shows
    that the query holds only the old value position.
    """
    d = vocab + 2 * seq_len
    lm = build_model(dict(vocab_size=vocab, d_model=d, n_layers=2, mixer="attention", mlp=False,
                          norm="rmsnorm", pos_emb="learned", max_len=seq_len))
    tok, ptr, pos = slice(0, vocab), slice(vocab, vocab + seq_len), slice(vocab + seq_len, d)
    eye_v, eye_t = torch.eye(vocab), torch.eye(seq_len)
    with torch.no_grad():
        _one_hot_tokens(lm, tok, vocab)
        lm.pos.weight[:, pos] = eye_t
        s0 = math.sqrt(d / 2)  # layer 0 input: tok + pos
        scale = SCORE * math.sqrt(d) / s0**2
        wq, wk, wv = lm.layers[0].mixer.qkv.weight.split(d)
        wq[tok, tok], wq[pos, pos] = eye_v * scale, -eye_t * scale  # match tok(t), not t itself ...
        wk[tok, tok], wk[pos, pos] = eye_v, eye_t  # ... against tok(s), pos(s)
        wv[ptr, pos] = torch.diag(torch.ones(seq_len - 1), -1) / s0  # ptr(s + 1) <- pos(s)
        lm.layers[0].mixer.out.weight[ptr, ptr] = eye_t
        s1 = math.sqrt(d / 3)  # layer 1 input at the query: tok + ptr + pos
        wq, wk, wv = lm.layers[1].mixer.qkv.weight.split(d)
        wq[pos, ptr] = eye_t * SCORE * math.sqrt(d) / s1**2  # the pointed position ...
        wk[pos, pos] = eye_t  # ... against pos(s)
        wv[tok, tok] = eye_v * COPY / s1
        lm.layers[1].mixer.out.weight[tok, tok] = eye_v
    return lm.eval()
