"""`wrap(model)`: a `transformers` causal LM under mecheval's readouts (the engine, `mechanism`, `conv_window`,
the timeline and the reports take it as they take an `LM`).

The map is found by walking the module tree and checked on a probe input, never read from a per-family table:
    blocks      the one ModuleList of config.num_hidden_layers modules of one class
    each block  its direct children as its forward calls them: norm1, mixer[, norm2, mlp], checked to be
                the pre-norm residual block  y = x + mixer(norm1(x))  [ out = y + mlp(norm2(y)) ]
    final norm  the base model's child called after the last block;  head: get_output_embeddings()
    SSM mixers  (a parameter A_log) run on the owned path (`mecheval.hf.ssm`), checked against the
                mixer's own forward on the probe
Sites (each [B, T, D_site]; mecheval's names): `layers.{i}.resid_pre` (the block's input), `mixer_in`
(norm1's output), for SSM mixers `conv_in`, `conv_out`, `state`, `core_out`, then `mixer_out` (the
mixer's output), `mlp_out` (blocks with an MLP) and `resid_post` (the block's output). There is no
`resid_mid`: the blocks add their residual inside their own forward, where no hook reaches.
The model runs its own forward; the sites are applied by hooks installed for one call and removed after
it (the model is left as it was). `forward_from(layer, …)` runs only blocks layer… (the block list is
swapped for its tail during the call).

`vocab` (optional, [V_task] model token ids) maps a task's token ids to the model's: tokens are looked up
in it, and logits are the model's at those ids only ([..., V_task]; probabilities are normalised over them).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from types import SimpleNamespace

import torch
from torch import nn

from mecheval.hf.ssm import UnsupportedModel, is_ssm, owned_path
from mecheval.models.lm import gather_positions, name_sites
from mecheval.models.sites import Site, record

PROBE = (2, 12)  # batch and length of the probe input that checks the map


class _Stop(Exception):
    """Raised by a hook to end a forward early (`embed_tokens`)."""


class Tap(nn.Module):
    """Identity on the mixer's output m [B, T, D] (what the engine records as the mixer's output)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class HFBlock(nn.Module):
    """Block i's sites and its transformers modules (`hf`: block, norm1, mixer, norm2, mlp; not registered,
    so the wrapper's state dict is the model's)."""

    FINISH_SITES = ("mixer_out", "mlp_out", "resid_post")

    def __init__(self, block: nn.Module, calls: list[str], path: nn.Module | None) -> None:
        super().__init__()
        c = [getattr(block, n) for n in calls]
        self.hf = SimpleNamespace(block=block, norm1=c[0], mixer=c[1], norm2=c[2] if len(c) > 2 else None,
                                  mlp=c[3] if len(c) > 2 else None, names=calls)
        self.resid_pre, self.mixer_in = Site(), Site()
        self.mixer = path if path is not None else Tap()
        self.mixer_out = Site()
        if self.hf.mlp is not None:
            self.mlp_out = Site()
        self.resid_post = Site()

    def finish(self, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        """The block after its mixer, position-wise: (x, m) [..., D] -> the block's output [..., D]."""
        x = x + self.mixer_out(m)
        if self.hf.mlp is not None:
            x = x + self.mlp_out(self.hf.mlp(self.hf.norm2(x)))
        return self.resid_post(x)


class HFLM(nn.Module):
    """forward(tokens [B, T], positions=None) -> logits [B, T, V] (or at `positions`: [B, V] / [B, K, V]);
    `sites()`, `layers`, `forward_from`, `embed_tokens`, `unembed` as `mecheval.models.LM`'s."""

    def __init__(self, model: nn.Module, vocab: torch.Tensor | None = None) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("vocab", None if vocab is None else torch.as_tensor(vocab, dtype=torch.long), persistent=False)
        parent, self._attr, blocks = find_blocks(model)
        head = model.get_output_embeddings()
        if head is None:
            raise UnsupportedModel(f"{type(model).__name__}: get_output_embeddings() is None (not a causal LM with a head)")
        for name, m in (("_parent", parent), ("head", head)):  # the model's modules, not registered twice
            object.__setattr__(self, name, m)
        meta = next(model.parameters()).is_meta  # built to list sites or check a config: no values to check
        calls, inputs, outputs, after = _probe(_materialised(model) if meta else model)
        layers = []
        for i, block in enumerate(blocks):
            what = f"{type(model).__name__} layer {i} ({type(block).__name__})"
            _check_block(what, calls[i], inputs[i], outputs[i])
            mixer = getattr(block, calls[i][1])
            path = owned_path(mixer, i, what) if is_ssm(mixer) else None
            if path is not None and not meta:
                _check_close(f"{what}: the owned re-scan of {calls[i][1]}", path(inputs[i][calls[i][1]]), outputs[i][calls[i][1]])
            layers.append(HFBlock(block, calls[i], path))
        self.layers = layers  # a plain list: the blocks' transformers modules stay registered once, in `model`
        if len(after) != 1:
            raise UnsupportedModel(f"{type(model).__name__}: expected one final norm called after the last block, found {after}")
        object.__setattr__(self, "norm_f", getattr(self._parent, after[0]))  # not registered: the model's
        self._sites = name_sites(self.layers)
        if not meta:
            self._check_readout()

    def sites(self) -> "OrderedDict[str, Site]":
        """Site name -> identity module, in forward order (module docstring)."""
        return self._sites

    # -- weights: a tied parameter (lm_head = embeddings) is saved once ------------------------------------
    def _aliases(self) -> set[str]:
        """State-dict keys of parameters already listed under an earlier name (tied weights)."""
        seen, out = set(), set()
        for name, p in self.named_parameters(remove_duplicate=False):
            (out.add(name) if id(p) in seen else seen.add(id(p)))
        return out

    def state_dict(self, *args, **kwargs):
        """The model's state dict without the tied aliases (safetensors stores a tensor once)."""
        state = super().state_dict(*args, **kwargs)
        for k in self._aliases():
            state.pop(kwargs.get("prefix", "") + k, None)
        return state

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """`state_dict`'s load; the tied aliases are filled by their first name."""
        result = super().load_state_dict(state_dict, strict=False, assign=assign)
        missing = sorted(set(result.missing_keys) - self._aliases())
        if strict and (missing or result.unexpected_keys):
            raise RuntimeError(f"state dict: missing {missing}, unexpected {sorted(result.unexpected_keys)}")
        return result

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    # -- the runs ------------------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        with self._hooked(0):
            logits = self._logits(self._ids(tokens))
        return logits if positions is None else gather_positions(logits, positions)

    def forward_from(self, layer: int, resid: torch.Tensor, positions: torch.Tensor | None = None, *, narrow_tail: bool = False) -> torch.Tensor:
        """Runs blocks layer… on `resid` (the residual entering `layer`, [B, T, D]) and the head
        (`narrow_tail` is accepted and ignored: the model's forward runs every position)."""
        ids = torch.zeros(resid.shape[:2], dtype=torch.long, device=resid.device)
        with self._hooked(layer, resid):
            logits = self._logits(ids)
        return logits if positions is None else gather_positions(logits, positions)

    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, T] -> the residual stream entering layer 0, [B, T, D]."""
        store = {}

        def stop(_m, args, kwargs):
            store["x"] = _first(args, kwargs)
            raise _Stop

        handle = self.layers[0].hf.block.register_forward_pre_hook(stop, with_kwargs=True)
        try:
            self._logits(self._ids(tokens))
        except _Stop:
            return store["x"]
        finally:
            handle.remove()
        raise UnsupportedModel("the first block was never called")

    def unembed(self, h: torch.Tensor) -> torch.Tensor:
        """Final norm and head: [..., D] -> [..., V] (V: the model's, or len(vocab))."""
        return self._restrict(self.head(self.norm_f(h)))

    def _ids(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens if self.vocab is None else self.vocab[tokens]

    def _restrict(self, logits: torch.Tensor) -> torch.Tensor:
        return logits if self.vocab is None else logits[..., self.vocab]

    def _logits(self, ids: torch.Tensor) -> torch.Tensor:
        return self._restrict(self.model(input_ids=ids, use_cache=False).logits)

    @contextlib.contextmanager
    def _hooked(self, start: int, resid: torch.Tensor | None = None) -> Iterator[None]:
        """Within the block: the model runs blocks start… only, the first on `resid` if given, with every
        site applied and SSM mixers on their owned paths. Everything is undone on exit, even on error."""
        handles, swapped = [], []
        blocks = getattr(self._parent, self._attr)
        try:
            if start:
                setattr(self._parent, self._attr, nn.ModuleList(list(blocks)[start:]))
            for i, b in enumerate(self.layers[start:], start):
                hf = b.hf
                replace = resid if i == start else None
                handles.append(hf.block.register_forward_pre_hook(
                    lambda _m, a, k, b=b, r=replace: _with_first(a, k, b.resid_pre(r if r is not None else _first(a, k))),
                    with_kwargs=True))
                handles.append(hf.norm1.register_forward_hook(lambda _m, _a, out, b=b: b.mixer_in(out)))
                if isinstance(b.mixer, Tap):  # the mixer's output passes the tap (what the engine records)
                    fns = (b.mixer_out, b.mixer)
                else:  # an SSM: its owned path runs instead of its forward
                    hf.mixer.forward = lambda *a, b=b, **k: b.mixer(_first(a, k))
                    swapped.append(hf.mixer)
                    fns = (b.mixer_out,)
                handles.append(hf.mixer.register_forward_hook(lambda _m, _a, out, fns=fns: _map_first(out, *fns)))
                if hf.mlp is not None:
                    handles.append(hf.mlp.register_forward_hook(lambda _m, _a, out, b=b: _map_first(out, b.mlp_out)))
                handles.append(hf.block.register_forward_hook(lambda _m, _a, out, b=b: _map_first(out, b.resid_post)))
            yield
        finally:
            for h in handles:
                h.remove()
            for m in swapped:
                del m.forward
            setattr(self._parent, self._attr, blocks)

    @torch.no_grad()
    def _check_readout(self) -> None:
        """On the probe: the sited forward gives the model's logits, and so does `forward_from` at the last
        layer (the block-list swap and the final norm + head)."""
        was = self.model.training
        self.eval()
        last = len(self.layers) - 1
        name = type(self.model).__name__
        try:
            ids = _probe_ids(self.head.out_features, self.head.weight.device)
            ref = self.model(input_ids=ids, use_cache=False).logits
            with self._hooked(0), record({"x": self.layers[last].resid_pre}) as seen:
                _check_close(f"{name}: the wrapped forward", self.model(input_ids=ids, use_cache=False).logits, ref)
            with self._hooked(last, seen["x"]):
                got = self.model(input_ids=torch.zeros_like(ids), use_cache=False).logits
            _check_close(f"{name}: forward_from(last layer) (the block list swapped for its tail)", got, ref)
        finally:
            self.train(was)


def wrap(model: nn.Module, vocab: torch.Tensor | None = None) -> HFLM:
    """A `transformers` causal LM (`…ForCausalLM`) as a module mecheval's readouts take (module docstring);
    UnsupportedModel, naming what is missing, for a model it cannot map."""
    return HFLM(model, vocab)


# -- discovery -------------------------------------------------------------------------------------------
def find_blocks(model: nn.Module) -> tuple[nn.Module, str, nn.ModuleList]:
    """(parent, attribute, blocks): the one ModuleList of config.num_hidden_layers modules of one class."""
    n = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    found = []
    for path, m in model.named_modules():
        if isinstance(m, nn.ModuleList) and len(m) and (n is None or len(m) == n) and len({type(b) for b in m}) == 1:
            parent_path, _, attr = path.rpartition(".")
            found.append((model.get_submodule(parent_path), attr, m, path))
    if len(found) != 1:
        where = [f[3] for f in found]
        raise UnsupportedModel(f"{type(model).__name__}: expected one ModuleList of {n} blocks of one class, found {where or 'none'}")
    return found[0][:3]


def _probe_ids(vocab: int, device: torch.device) -> torch.Tensor:
    """The probe input: PROBE random token ids (seeded), on `device`."""
    return torch.randint(0, vocab, PROBE, generator=torch.Generator().manual_seed(0), device="cpu").to(device)


def _materialised(model: nn.Module) -> nn.Module:
    """A copy on the CPU with zero weights of a model built on the meta device (its probe's structure,
    found by names, is the model's)."""
    import copy

    with torch.device("cpu"):
        twin = copy.deepcopy(model).to_empty(device="cpu")
        for t in (*twin.parameters(), *twin.buffers()):
            t.data.zero_()
    return twin


def _probe(model: nn.Module):
    """One eval forward on a probe input recording, per block, its direct children (by name) in call
    order with their inputs and outputs (block input under "", output under "out"), and the names of the
    blocks' parent's children called after the last block."""
    parent, _, blocks = find_blocks(model)
    calls = [[] for _ in blocks]
    inputs = [{} for _ in blocks]
    outputs = [{} for _ in blocks]
    after: list[str] = []
    handles = []
    last = blocks[len(blocks) - 1]
    done = {"last": False}

    def child_hook(i, name):
        def hook(_m, args, kwargs, out):
            if name not in inputs[i]:
                calls[i].append(name)
                inputs[i][name], outputs[i][name] = _first(args, kwargs), _first_out(out)
        return hook

    def block_hook(i):
        def hook(_m, args, kwargs, out):
            inputs[i][""], outputs[i]["out"] = _first(args, kwargs), _first_out(out)
            if blocks[i] is last:
                done["last"] = True
        return hook

    for i, b in enumerate(blocks):
        handles.append(b.register_forward_hook(block_hook(i), with_kwargs=True))
        for name, child in b.named_children():
            handles.append(child.register_forward_hook(child_hook(i, name), with_kwargs=True))
    for name, child in parent.named_children():
        if child is not blocks:
            handles.append(child.register_forward_hook(lambda *_a, name=name: after.append(name) if done["last"] else None))
    was = model.training
    model.eval()
    try:
        dev = next(model.parameters()).device
        with torch.no_grad(), torch.device(dev):  # (inside a meta-device context: the twin's device)
            model(input_ids=_probe_ids(model.get_output_embeddings().out_features, dev), use_cache=False)
    finally:
        model.train(was)
        for h in handles:
            h.remove()
    return calls, inputs, outputs, after


def _check_block(what: str, calls: list[str], ins: dict, outs: dict) -> None:
    """The pre-norm residual structure (module docstring), on the probe's tensors."""
    shape = "x + mixer(norm(x)) [then + mlp(norm(·))]"
    if len(calls) not in (2, 4):
        raise UnsupportedModel(f"{what}: expected children called as norm, mixer[, norm, mlp] ({shape}); called: {calls}")
    x = ins[""]
    y = x + outs[calls[1]]
    checks = [(f"{calls[0]} reads the block input", ins[calls[0]], x),
              (f"{calls[1]} reads {calls[0]}'s output", ins[calls[1]], outs[calls[0]])]
    if len(calls) == 4:
        checks += [(f"{calls[2]} reads x + {calls[1]}(·)", ins[calls[2]], y),
                   (f"{calls[3]} reads {calls[2]}'s output", ins[calls[3]], outs[calls[2]])]
        y = y + outs[calls[3]]
    checks.append(("the block output is the residual sum", outs["out"], y))
    for desc, a, b in checks:
        if not _close(a, b):
            raise UnsupportedModel(f"{what}: not a pre-norm residual block {shape}: {desc} fails; children called: {calls}")


def _close(a, b) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return False
    if a.is_meta or b.is_meta:  # built on the meta device (to list sites): shapes only
        return True
    tol = 1e-4 if a.dtype == torch.float32 else 2e-2
    return bool((a.float() - b.float()).abs().max() <= tol * (1 + b.float().abs().max()))


def _check_close(what: str, a: torch.Tensor, b: torch.Tensor) -> None:
    if not _close(a, b):
        diff = (a.float() - b.float()).abs().max().item() if a.shape == b.shape else f"shapes {tuple(a.shape)} vs {tuple(b.shape)}"
        raise UnsupportedModel(f"{what} differs from the model's own forward (max |diff| {diff})")


# -- hook plumbing ---------------------------------------------------------------------------------------
def _first(args: tuple, kwargs: dict) -> torch.Tensor:
    """The hidden states a module is called with: its first positional argument, else `hidden_states`."""
    return args[0] if args else kwargs["hidden_states"]


def _with_first(args: tuple, kwargs: dict, x: torch.Tensor):
    if args:
        return (x, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": x}


def _first_out(out):
    return out[0] if isinstance(out, tuple) else out


def _map_first(out, *fns):
    """`out` (a tensor, or a tuple whose first item is the hidden states) with fns applied in turn
    (innermost last) to the hidden states."""
    x = _first_out(out)
    for fn in reversed(fns):
        x = fn(x)
    return (x, *out[1:]) if isinstance(out, tuple) else x
