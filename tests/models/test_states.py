"""State sites (`layers.{i}.state`): reading and patching the state after t on the parallel path equals the
per-step recurrence with its state read or replaced at t, for every stateful mixer, fused and reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mecheval.models.mixers.based import Based, BasedOptions
from mecheval.models.mixers.deltanet import DeltaNet, DeltaNetOptions
from mecheval.models.mixers.deltaproduct import DeltaProduct, DeltaProductOptions
from mecheval.models.mixers.gated_deltanet import GatedDeltaNet, GatedDeltaNetOptions
from mecheval.models.mixers.gla import GLA, GLAOptions
from mecheval.models.mixers.h3 import H3, H3Options
from mecheval.models.mixers.mamba import Mamba, MambaOptions
from mecheval.models.mixers.mamba2 import Mamba2, Mamba2Options
from mecheval.models.mixers.mamba3 import Mamba3, Mamba3Options
from mecheval.models.mixers.rwkv7 import RWKV7, RWKV7Options
from mecheval.models.ops.dispatch import kernel_mode
from mecheval.models.sites import attach, record
from mecheval.models.states import StateValue

D, T = 8, 11


def _complex_flat(x):
    return torch.view_as_real(x).flatten(1)


def _complex_set(x, flat):
    return torch.view_as_complex(flat.reshape(*x.shape, 2).contiguous())


def _based_flat(S, z):
    return torch.cat([S, z.unsqueeze(-1)], dim=-1).flatten(1)


def _second(s):  # the step state's h when it is the second entry: (conv state, h, ...)
    return s[1].flatten(1)


def _second_set(s, flat):
    return (s[0], flat.view_as(s[1]), *s[2:])


# mixer -> (build, the step state's h as [B, D_state], the step state with h replaced)
STATEFUL = {
    "mamba": (lambda c: Mamba(D, c, MambaOptions(d_state=4), 0, 64),
              lambda s: s[1].flatten(1), lambda s, f: (s[0], f.view_as(s[1]))),
    "h3": (lambda c: H3(D, c, H3Options(d_state=6), 0, 64),
           lambda s: _complex_flat(s[1]), lambda s, f: (s[0], _complex_set(s[1], f))),
    "deltanet": (lambda c: DeltaNet(D, c, DeltaNetOptions(n_heads=2), 0, 64),
                 lambda s: s[1].flatten(1), lambda s, f: (s[0], f.view_as(s[1]))),
    "based": (lambda c: Based(D, 0, BasedOptions(feature_dim=3, n_heads=2, chunk_size=4), 0, 64),
              lambda s: _based_flat(*s),
              lambda s, f: (lambda g: (g[..., :-1], g[..., -1]))(f.view(*s[1].shape, -1))),
    "mamba2": (lambda c: Mamba2(D, c, Mamba2Options(d_state=4, head_dim=4), 0, 64), _second, _second_set),
    "mamba3": (lambda c: Mamba3(D, 0, Mamba3Options(d_state=4, head_dim=4), 0, 64), _second, _second_set),
    "gated-deltanet": (lambda c: GatedDeltaNet(D, c, GatedDeltaNetOptions(n_heads=2), 0, 64), _second, _second_set),
    # the DPLR mixers' step state: (conv window, u_{t-1}, S)
    "gla": (lambda c: GLA(D, c, GLAOptions(n_heads=2), 0, 64),
            lambda s: s[2].flatten(1), lambda s, f: (*s[:2], f.view_as(s[2]))),
    "rwkv7": (lambda c: RWKV7(D, c, RWKV7Options(n_heads=2), 0, 64),
              lambda s: s[2].flatten(1), lambda s, f: (*s[:2], f.view_as(s[2]))),
    "deltaproduct": (lambda c: DeltaProduct(D, c, DeltaProductOptions(n_heads=2, gate=True), 0, 64),
                     lambda s: s[2].flatten(1), lambda s, f: (*s[:2], f.view_as(s[2]))),
}


def mixer(name: str, seed: int = 0):
    torch.manual_seed(seed)
    m = STATEFUL[name][0](3 if name != "based" else 0).double()
    with torch.no_grad():  # larger weights than at init, so a replaced state shows in the output
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m


def stepped(m, name, x, pos=None, values=None):
    """The step form over x [B, T, D]: (outputs [B, T, D], states after each t [B, T, D_state]); the state
    after pos[b] replaced by values[b] when given."""
    get, put = STATEFUL[name][1:]
    s = m.init_state(x.shape[0], dtype=x.dtype)
    ys, hs = [], []
    for t in range(x.shape[1]):
        y, s = m.step(x[:, t], s)
        if pos is not None:
            flat = get(s)
            s = put(s, torch.where((pos == t)[:, None], values, flat))
        ys.append(y)
        hs.append(get(s))
    return torch.stack(ys, 1), torch.stack(hs, 1)


@pytest.mark.parametrize("mode", ["auto", "reference"])
@pytest.mark.parametrize("name", list(STATEFUL))
@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), data=st.data())
def test_state_read_and_patch_equal_the_recurrence(name, mode, seed, data):
    B = 3
    m = mixer(name, seed)
    x = torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    # before the last position, so that a later output can move (a patch after the last step changes nothing)
    pos = torch.tensor(data.draw(st.lists(st.integers(0, T - 2), min_size=B, max_size=B)))
    rows = torch.arange(B)
    y_ref, h_ref = stepped(m, name, x)
    with kernel_mode(mode), torch.no_grad(), record({"s": m.state}) as seen:
        y = m(x)
    value = seen["s"]
    assert isinstance(value, StateValue) and value.size == h_ref.shape[-1]
    torch.testing.assert_close(y, y_ref, atol=1e-9, rtol=0)
    torch.testing.assert_close(value.at(rows, pos), h_ref[rows, pos], atol=1e-9, rtol=0)
    values = h_ref[rows, pos] + torch.randn(B, value.size, dtype=torch.float64)
    with kernel_mode(mode), torch.no_grad(), attach({"s": m.state}, {"s": lambda v: v.patched(rows, pos, values)}):
        y_patched = m(x)
    y_ref_patched, _ = stepped(m, name, x, pos, values)
    torch.testing.assert_close(y_patched, y_ref_patched, atol=1e-5, rtol=0)
    before = torch.arange(T)[None, :] <= pos[:, None]  # nothing up to pos moves
    assert torch.equal(y_patched[before], y[before])
    assert not torch.allclose(y_patched, y)


@pytest.mark.parametrize("name", list(STATEFUL))
def test_patching_the_own_state_at_every_position_changes_nothing(name):
    B = 2
    m = mixer(name).float()
    x = torch.randn(B, T, D, generator=torch.Generator().manual_seed(1))
    rows = torch.arange(B)
    with torch.no_grad():
        y = m(x)
        for t in range(T):
            pos = torch.full((B,), t)
            with attach({"s": m.state}, {"s": lambda v, pos=pos: v.patched(rows, pos, v.at(rows, pos))}):
                torch.testing.assert_close(m(x), y, atol=1e-5, rtol=1e-5)
        with attach({"s": m.state}, {"s": lambda v: v.patched(rows[:0], rows[:0], torch.zeros(0, v.size))}):
            assert torch.equal(m(x), y)  # patching no example changes nothing, bitwise


@pytest.mark.parametrize("mode", ["auto", "reference"])
@pytest.mark.parametrize("name", list(STATEFUL))
def test_every_state_and_all_moves_at_once_equal_one_position_at_a_time(name, mode):
    """`every` is `at` at each position; the mixer's `_change_every(δ)` (one pass of the recurrence) is the
    sum of the single moves' responses (`StateValue`'s default): exactly for outputs linear in the state, to
    first order for Based's normalised output (δ of 1e-6)."""
    B, eps = 3, 1e-6
    m = mixer(name, 5)
    x = torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    with kernel_mode(mode), torch.no_grad(), record({"s": m.state}) as seen:
        m(x)
    value, rows = seen["s"], torch.arange(B)
    _, h_ref = stepped(m, name, x)
    torch.testing.assert_close(value.every(), h_ref, atol=1e-9, rtol=0)
    torch.testing.assert_close(StateValue._every(value, rows), h_ref, atol=1e-9, rtol=0)
    delta = eps * torch.randn(B, T, value.size, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    at_once = value._change_every(rows, delta) / eps
    singly = StateValue._change_every(value, rows, delta) / eps
    assert at_once.abs().max() > 1e-3  # the moves reach the output
    torch.testing.assert_close(at_once, singly, atol=1e-6, rtol=1e-5)
    first = at_once.select(2 if name == "based" else 1, 0)
    assert torch.equal(first, torch.zeros_like(first))  # nothing moves before position 1


@pytest.mark.parametrize("name", list(STATEFUL))
def test_first_order_of_every_state_cell_is_the_single_patch_s_derivative(name):
    """`first_order_every(source, [g])[:, t]` is ⟨d/dε output(h_t := h_t + ε (h'_t − h_t)), g⟩ at ε = 0 for every
    t (the single-position `respond`, by central differences), and the closed forms (H3, Based) are the
    generic pass's."""
    B, eps = 3, 1e-4
    m = mixer(name, 7)
    gen = torch.Generator().manual_seed(4)
    x, x2 = (torch.randn(B, T, D, dtype=torch.float64, generator=gen) for _ in range(2))
    with torch.no_grad(), record({"s": m.state}) as seen:
        m(x2)
        source = seen["s"]
        m(x)
        value = seen["s"]
    g = torch.randn(value.output.shape, dtype=torch.float64, generator=gen)
    rows = torch.arange(B)
    (first,) = value.first_order_every(source, [g])
    assert first.shape == (B, T)
    for t in range(T):
        pos = torch.full((B,), t)
        d = source.at(rows, pos) - value.at(rows, pos)
        moved = [(value.respond(rows, pos, s * eps * d) * g).flatten(1).sum(1) for s in (1, -1)]
        torch.testing.assert_close(first[:, t], (moved[0] - moved[1]) / (2 * eps), atol=1e-6, rtol=1e-6)
    assert first.abs().max() > 1e-3
    generic = StateValue._first_order(value, source, rows, [g])[0]  # through `_change_every`
    torch.testing.assert_close(generic, first, atol=1e-9, rtol=1e-9)


def test_one_position_per_example():
    m = mixer("mamba")
    x = torch.randn(2, T, D, dtype=torch.float64)
    twice = torch.tensor([0, 0])
    with torch.no_grad(), attach({"s": m.state}, {"s": lambda v: v.patched(twice, twice, v.at(twice, twice))}):
        with pytest.raises(ValueError, match="one position per example"):
            m(x)


def test_state_reads_are_chunked_within_the_budget(monkeypatch):
    """A budget smaller than one row's work: every row is its own chunk, same states and first-order products."""
    m = mixer("h3")
    x, x2 = torch.randn(2, 4, T, D, dtype=torch.float64)
    with torch.no_grad(), record({"s": m.state}) as seen:
        m(x2)
        source = seen["s"]
        m(x)
    value = seen["s"]
    rows, pos = torch.arange(4), torch.tensor([1, 5, 10, 0])
    g = torch.randn_like(value.output)

    def reads():
        return value.at(rows, pos), value.every(), *value.first_order_every(source, [g, 2 * g])

    whole = reads()
    assert whole[2].abs().max() > 1e-3
    monkeypatch.setattr("mecheval.models.states.STATE_BUDGET", 1)
    for again, before in zip(reads(), whole):
        torch.testing.assert_close(again, before, atol=1e-12, rtol=0)


# --- the engine: state cells of a whole LM against the stepped model -------------------------------

LM_OPTIONS = {"mamba": {"d_state": 4}, "h3": {"d_state": 6}, "deltanet": {"n_heads": 2}, "based": {"feature_dim": 3},
              "mamba2": {"d_state": 4, "head_dim": 4}, "mamba3": {"d_state": 4, "head_dim": 4},
              "gated-deltanet": {"n_heads": 2},
              "gla": {"n_heads": 2}, "rwkv7": {"n_heads": 2}, "deltaproduct": {"n_heads": 2, "gate": True}}


def small_lm(name: str, vocab: int):
    from mecheval.models.lm import build_model

    torch.manual_seed(0)
    lm = build_model(dict(vocab_size=vocab, max_len=32, d_model=D, n_layers=2, mixer=name, init_std=0.5,
                          d_conv=0 if name == "based" else 3, options={name: LM_OPTIONS[name]})).double().eval()
    with torch.no_grad():
        for p in lm.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return lm


@torch.no_grad()
def stepped_lm(lm, name, tokens, layer, pos, values):
    """Logits [B, T, V] of the step form with layer `layer`'s state after pos[b] replaced by values[b]."""
    get, put = STATEFUL[name][1:]
    h = lm.embed_tokens(tokens)
    states = [blk.mixer.init_state(tokens.shape[0], dtype=h.dtype) for blk in lm.layers]
    outs = []
    for t in range(tokens.shape[1]):
        x = h[:, t]
        for i, blk in enumerate(lm.layers):
            x, states[i] = blk.step(x, states[i])
            if i == layer:
                states[i] = put(states[i], torch.where((pos == t)[:, None], values, get(states[i])))
        outs.append(x)
    return lm.unembed(torch.stack(outs, dim=1))


@pytest.mark.parametrize("name", list(STATEFUL))
def test_engine_state_cells_equal_the_stepped_model(name):
    from mecheval.interventions import Cell, patch_cells
    from mecheval.interventions.engine import answer_scores
    from mecheval.tasks import make_task

    task = make_task("ar", n_pairs=4, n_keys=16, n_values=16)
    batch = task.sample(6, seed=3)
    corrupt = task.corrupt(batch, "key", seed=0)
    lm = small_lm(name, task.vocab_size)
    rows = torch.arange(len(batch))
    cells = [Cell(f"layers.{i}.state", role) for i in range(2) for role in ("key", "value", "query")]
    r = patch_cells(lm, corrupt.tokens, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)
    with torch.no_grad(), record(lm.sites(), ["layers.0.state", "layers.1.state"]) as clean:
        lm(batch.tokens)
    for c, p_patched in zip(cells, r["p_patched"]):
        pos = batch.roles[c.position]
        values = clean[c.site].at(rows, pos)
        logits = stepped_lm(lm, name, corrupt.tokens, c.layer, pos, values)
        p_ref, _ = answer_scores(logits[rows, batch.answer_pos][:, None], batch.answer[:, None])
        torch.testing.assert_close(p_patched.double(), p_ref.double(), atol=1e-5, rtol=0)
    after_value = r["p_patched"][cells.index(Cell("layers.1.state", "value"))]
    assert not torch.allclose(after_value.double(), r["p_base"].double())  # the patch acts
    at_answer = r["p_patched"][cells.index(Cell("layers.1.state", "query"))]  # the answer is read at the query:
    assert torch.equal(at_answer, r["p_base"])  # the state after it comes too late
    same = patch_cells(lm, batch.tokens, batch.tokens, cells, batch.roles, batch.answer, batch.answer_pos)
    assert torch.equal(same["p_patched"], same["p_base"].expand_as(same["p_patched"]))  # clean into clean


def test_asking_attention_for_its_state_says_it_has_none():
    from mecheval.interventions import resolve_sites
    from mecheval.models.lm import build_model

    lm = build_model(dict(vocab_size=8, d_model=8, n_layers=2, max_len=16))
    with pytest.raises(ValueError, match="Attention: no recurrent state, so no state site"):
        resolve_sites(lm, ["layers.0.state"])
    hybrid = build_model(dict(vocab_size=8, d_model=8, n_layers=2, max_len=16, mixer=["baseconv", "based"]))
    assert resolve_sites(hybrid, ["state"]) == ["layers.1.state"]
