"""The language model: token (+ position) embedding -> pre-norm blocks -> final norm -> tied head.

Embedding (Vaswani et al., 2017, sec. 3.4): h_0[t] = sqrt(D) E[x_t] + P[t] with E ~ N(0, 1/D) and
P ~ N(0, 1), so the residual stream starts at unit scale, like the outputs of the blocks' linear
layers (PyTorch's default init). The tied head reads E unscaled, so initial logits are O(1).
With embeddings at a small scale (e.g. N(0, 0.02²)) the first block's output drowns the token
identities, and 2-layer attention then fails to learn even 2-pair AR in 1,500 steps.

Block i (sites in brackets, each [B, T, D] unless noted):
    x = [resid_pre](x)
    x = [resid_mid](x + [mixer_out](mixer([mixer_in](norm1(x)))))   mixer sites: [conv_in], [conv_out], [core_out]
    x = x + [mlp_out](W_2 gelu(W_1 norm2(x)))                         (blocks with an MLP)
    x = [resid_post](x)
"""

from __future__ import annotations

import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from mecheval.models.config import ZOOLOGY_BLOCKS, ZOOLOGY_RESCALED, HFModelConfig, ModelConfig, is_hf_model
from mecheval.models.kinds import model_kind
from mecheval.models.mixers import mixer_spec
from mecheval.models.norms import RMSNorm
from mecheval.models.sites import Site, run_with_cache

ZOOLOGY_STD = 0.02  # the std of embeddings (token and position) and Linears in the study's code (zoology's _init_weights)


def make_norm(kind: str, d: int, eps: float | None = None, bias: bool = False) -> nn.Module:
    """A LayerNorm (bias only if asked) or an RMSNorm over the last dim d; eps None: torch's default for each."""
    if kind == "layernorm":
        return nn.LayerNorm(d, eps=1e-5 if eps is None else eps, bias=bias)
    return RMSNorm(d, eps=eps)


SITE_ORDER = ("resid_pre", "mixer_in", "mixer", "mixer_out", "resid_mid", "mlp_out", "resid_post")  # "mixer": its sites


def name_sites(layers) -> "OrderedDict[str, Site]":
    """Every `Site` module anywhere in block i is `layers.{i}.{its attribute name}`, in forward order:
    the block's own sites in SITE_ORDER, the mixer's (at any depth) in its module order, which is the
    order its forward visits them (`mecheval check-mixer` checks it). `layers`: blocks whose attributes
    are the sites of SITE_ORDER and a `mixer` (an LM's, or `mecheval.hf`'s wrapped blocks)."""
    sites: OrderedDict[str, Site] = OrderedDict()
    rank = {k: r for r, k in enumerate(SITE_ORDER)}
    for i, block in enumerate(layers):
        found: dict[str, tuple[int, Site]] = {}
        for path, m in block.named_modules():
            if isinstance(m, Site):
                kind = path.rsplit(".", 1)[-1]
                if kind in found:
                    raise ValueError(f"layer {i}: two sites named {kind!r}")
                found[kind] = (rank["mixer"] if path.startswith("mixer.") else rank[kind], m)
        for kind in sorted(found, key=lambda k: found[k][0]):  # stable: module order within the mixer
            site = found[kind][1]
            site.name = f"layers.{i}.{kind}"
            sites[site.name] = site
    return sites


class MLP(nn.Module):
    """y = W_2 gelu(W_1 x + b_1) + b_2, hidden width ratio * D; the biases only with `bias`."""

    def __init__(self, d: int, ratio: int, bias: bool = False) -> None:
        super().__init__()
        self.up = nn.Linear(d, ratio * d, bias=bias)
        self.down = nn.Linear(ratio * d, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, i: int) -> None:
        super().__init__()
        spec = mixer_spec(cfg.mixer[i])
        self.resid_pre, self.mixer_in, self.mixer_out, self.resid_mid = Site(), Site(), Site(), Site()
        self.norm1 = make_norm(cfg.norm[i], cfg.d_model, cfg.norm_eps, cfg.block_bias)
        self.mixer = spec.cls(cfg.d_model, cfg.d_conv[i], cfg.mixer_options(cfg.mixer[i]), i, cfg.max_len)
        if cfg.mlp[i]:
            self.norm2 = make_norm(cfg.norm[i], cfg.d_model, cfg.norm_eps, cfg.block_bias)
            self.mlp = MLP(cfg.d_model, cfg.mlp_ratio, cfg.block_bias)
            self.mlp_out = Site()
        else:
            self.mlp = None
        self.resid_post = Site()

    FINISH_SITES = ("mixer_out", "resid_mid", "mlp_out", "resid_post")  # the sites `finish` applies

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, T, D] -> [B, T, D]
        return self.finish(*self.mix(x))

    def mix(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The block up to its mixer: x [B, T, D] -> (x after site resid_pre, the mixer's output m)."""
        x = self.resid_pre(x)
        return x, self.mixer(self.mixer_in(self.norm1(x)))

    def finish(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        """The rest of the block, position-wise: (x, m) [..., D] -> the block's output [..., D]."""
        x = self.resid_mid(x + self.mixer_out(m))
        if self.mlp is not None:
            x = x + self.mlp_out(self.mlp(self.norm2(x)))
        return self.resid_post(x)

    def step(self, x_t: torch.Tensor, state):
        """The recurrent view of the block (sites are not applied): x_t [B, D] -> (y_t [B, D], state)."""
        m, state = self.mixer.step(self.norm1(x_t), state)
        x_t = x_t + m
        if self.mlp is not None:
            x_t = x_t + self.mlp(self.norm2(x_t))
        return x_t, state


class LM(nn.Module):
    """forward(tokens [B, T]) -> logits [B, T, V]; `positions` restricts the head to some positions."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model) if cfg.pos_emb == "learned" else None
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm_f = make_norm(cfg.final_norm, cfg.d_model, cfg.norm_eps, cfg.final_norm_bias)
        self.head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._init_weights()
        self._sites = name_sites(self.layers)

    @torch.no_grad()
    def _init_weights(self) -> None:
        d, zoology = self.cfg.d_model, self.cfg.init == "zoology"
        self.embed_scale = 1.0 if zoology else d**0.5
        nn.init.normal_(self.embed.weight, std=self.cfg.init_std or (ZOOLOGY_STD if zoology else d**-0.5))
        if self.pos is not None:
            nn.init.normal_(self.pos.weight, std=ZOOLOGY_STD if zoology else 1.0)
        if self.head is not None:
            nn.init.normal_(self.head.weight, std=d**-0.5)
        if zoology:
            for mixer, block in zip(self.cfg.mixer, self.layers):
                self._zoology_block(block, mixer)

    def _zoology_block(self, block: "Block", mixer: str) -> None:
        """zoology's `_init_weights` of one block, by its block type. MambaBlock: mamba_ssm's init, but out_proj
        re-drawn and divided by sqrt(n_layers) (one residual per layer). TransformerBlock: every Linear
        ~ N(0, 0.02²) with zero biases, the residual projections its name test finds (the MLP's W_2, and the
        mixer's where `ZOOLOGY_RESCALED` names it: attention's W_o) ~ N(0, 0.02² / (2 n_layers)) (GPT-2's scaled
        init: two residuals per layer); a conv keeps its own draw."""
        n = self.cfg.n_layers
        if ZOOLOGY_BLOCKS[mixer] == "MambaBlock":
            w = block.mixer.out_proj.weight
            nn.init.kaiming_uniform_(w, a=math.sqrt(5))
            w /= math.sqrt(n)
            return
        for m in block.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=ZOOLOGY_STD)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        rescaled = ZOOLOGY_RESCALED.get(mixer)
        for residual in (getattr(block.mixer, rescaled) if rescaled else None,
                         block.mlp.down if block.mlp is not None else None):
            if residual is not None:
                nn.init.normal_(residual.weight, std=ZOOLOGY_STD / math.sqrt(2 * n))

    def sites(self) -> "OrderedDict[str, Site]":
        """Site name -> identity module, in forward order: `layers.{i}.{resid_pre,…,resid_post}`."""
        return self._sites

    def run_with_cache(self, tokens: torch.Tensor, names: list[str] | None = None):
        """tokens [B, T] -> (logits [B, T, V], {site name: activation}); names: site names or globs
        (default: all). See `sites.run_with_cache`."""
        return run_with_cache(self, tokens, names)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> the residual stream entering layer 0, [B, T, D]."""
        T = tokens.shape[1]
        if T > self.cfg.max_len and self.pos is not None:
            raise ValueError(f"sequence length {T} exceeds max_len={self.cfg.max_len}")
        h = self.embed(tokens) * self.embed_scale
        if self.pos is not None:
            h = h + self.pos(torch.arange(T, device=tokens.device))
        return h

    def unembed(self, h: torch.Tensor) -> torch.Tensor:
        """Final norm and head: [..., D] -> [..., V]."""
        h = self.norm_f(h)
        return h @ self.embed.weight.T if self.head is None else self.head(h)

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """tokens [B, T] -> logits [B, T, V]; with `positions` ([B] or [B, K]) only there: [B, V] / [B, K, V]."""
        return self.forward_from(0, self.embed_tokens(tokens), positions)

    def forward_from(
        self,
        layer: int,
        resid: torch.Tensor,
        positions: torch.Tensor | None = None,
        *,
        narrow_tail: bool = False,
    ) -> torch.Tensor:
        """Runs layers[layer:] on `resid` (the residual entering `layer`, [B, T, D]) and the head.

        narrow_tail: with `positions`, the last block's position-wise part runs only there (same
        logits, less work; that block's FINISH_SITES then carry [B, D] or [B, K, D]).
        """
        for block in self.layers[layer:]:
            x, m = block.mix(resid)
            if narrow_tail and positions is not None and block is self.layers[-1]:
                return self.unembed(block.finish(gather_positions(x, positions), gather_positions(m, positions)))
            resid = block.finish(x, m)
        if positions is not None:
            resid = gather_positions(resid, positions)
        return self.unembed(resid)

    @torch.no_grad()
    def recurrent(self, tokens: torch.Tensor) -> torch.Tensor:
        """The step-by-step view of the whole model (every mixer's recurrent form): [B, T] -> [B, T, V]."""
        h = self.embed_tokens(tokens)
        B = tokens.shape[0]
        states = [blk.mixer.init_state(B, device=h.device, dtype=h.dtype) for blk in self.layers]
        outs = []
        for t in range(tokens.shape[1]):
            x = h[:, t]
            for i, blk in enumerate(self.layers):
                x, states[i] = blk.step(x, states[i])
            outs.append(x)
        return self.unembed(torch.stack(outs, dim=1))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def gather_positions(h: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """h [B, T, D], positions [B] or [B, K] -> h at those positions, [B, D] or [B, K, D]."""
    idx = positions if positions.dim() == 2 else positions[:, None]
    out = h.gather(1, idx[..., None].expand(-1, -1, h.shape[-1]))
    return out if positions.dim() == 2 else out[:, 0]


def build_model(cfg: ModelConfig | HFModelConfig | dict) -> LM:
    """An LM from a config (or a dict validated as one); a transformers model's (`HFModelConfig`) is built
    by its kind's adapter (`models.kinds`: `mecheval.hf.build`'s wrapped model)."""
    if is_hf_model(cfg) == "hf":
        return model_kind("hf").build(cfg if isinstance(cfg, HFModelConfig) else HFModelConfig.model_validate(cfg))
    return LM(cfg if isinstance(cfg, ModelConfig) else ModelConfig.model_validate(cfg))
