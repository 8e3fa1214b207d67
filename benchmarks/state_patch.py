"""A DPLR state patch (DeltaProduct's, RWKV-7's) at one position per row, its two parts each against the way it was
done before.
- The response (`ops.dplr.dplr_patch_response`, since 2026-12-07) both ways: the chunkwise form from the moved
  state, each row shifted to its patched step (the default where the decay is one per head), and stepping from the
  earliest patched step with each row's move joining at its own step (the default with a decay per key dimension);
  against stepping a tensor of moves at every step from step 0 (`dplr_states_response`). Against the way before
  (that tensor of moves stepped from the earliest patched step; the old module side by side, 512 rows, 90-180
  steps, one thread): 7.5-7.9x with a decay per head, 2.8-3.1x per key dimension.
- The state at each row's position (`ops.dplr.dplr_state_at`): the chunkwise form's chunk-entering states, then at
  most a chunk of steps, at chunk sizes 4, 8 and 16 (`state_at_chunk` picks by the decay's shape), against stepping
  every state from step 0 (`dplr_states`, indexed).

The state readout patches each layer's state at offsets from the key and from the answer, one position per row;
on ATR easy (documents up to ~90 tokens, two substeps a token for DeltaProduct) its patches ran through every step
before the patched one. Rows patched at positions drawn uniformly from [--from-frac·T, T); interleaved rounds;
prints seconds per call, the ratios and the largest differences (rounding only).

    python benchmarks/state_patch.py [--n 512] [--steps 180] [--from-frac 0.2] [--per-head] [--threads 1]
"""

from __future__ import annotations

import argparse

import torch

from common import median_seconds
from mecheval.models.ops.dplr import dplr_patch_response, dplr_state_at, dplr_states, dplr_states_response


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512, help="rows (examples)")
    ap.add_argument("--steps", type=int, default=180, help="recurrence steps (tokens × substeps)")
    ap.add_argument("--from-frac", type=float, default=0.2, help="the earliest patched step, as a fraction of --steps")
    ap.add_argument("--d", type=int, default=64, help="d_k = d_v (one head)")
    ap.add_argument("--per-head", action="store_true", help="one decay per head (DeltaProduct), not per key dimension")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    n, T, d = args.n, args.steps, args.d
    q, a, b = (torch.randn(n, T, 1, d, generator=g) / d**0.5 for _ in range(3))
    log_w = -torch.rand(n, T, 1, 1 if args.per_head else d, generator=g) * 0.1
    pos = torch.randint(int(args.from_frac * T), T, (n,), generator=g)
    rows = torch.arange(n)
    dS = torch.randn(n, 1, d, d, generator=g)
    moves = torch.zeros(n, T, 1, d, d)
    moves[rows, pos] = dS

    responses = {
        "chunkwise, shifted rows": lambda: dplr_patch_response(q, log_w, a, b, dS, pos, chunkwise=True),
        "stepped from the first patch": lambda: dplr_patch_response(q, log_w, a, b, dS, pos, chunkwise=False),
        "stepped from step 0 (reference)": lambda: dplr_states_response(q, log_w, a, b, moves),
    }
    decay = "one per head" if args.per_head else "one per key dimension"
    print(f"{n} rows, {T} steps, decay {decay}, patched at steps {int(pos.min())}-{int(pos.max())}, "
          f"{args.threads} thread(s)")
    _compare("the response to the patch:", responses)

    k, v = (torch.randn(n, T, 1, d, generator=g) / d**0.5 for _ in range(2))
    stepping = {f"chunk-entering, chunks of {c}": (lambda c=c: dplr_state_at(k, v, log_w, a, b, pos, c))
                for c in (4, 8, 16)}
    stepping["every step from 0 (reference)"] = lambda: dplr_states(k, v, log_w, a, b)[rows, pos]
    _compare("the state at each row's position:", stepping)


def _compare(title: str, ways: dict) -> None:
    """Times each way in interleaved rounds; ratios and largest differences against the last (the reference)."""
    reference_name = list(ways)[-1]
    reference = ways[reference_name]()
    times = {name: [] for name in ways}
    for _ in range(3):
        for name, fn in ways.items():
            times[name].append(median_seconds(fn, repeats=1))
    ref = min(times[reference_name])
    print(title)
    for name, fn in ways.items():
        diff = (fn() - reference).abs().max().item()
        best = min(times[name])
        print(f"  {name:32s} {best:.3f} s  ratio {ref / best:.2f}x  largest difference {diff:.1e}")

if __name__ == "__main__":
    main()
