"""mecheval: mechanistic evaluation of sequence-model architectures.

tasks (seeded generators) -> models (mixer zoo with named sites) -> training / sweeps
-> interchange interventions -> reports.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    # Heavy submodules load on first use so `import mecheval` and `mecheval --help` stay fast.
    if name == "load_run":
        from mecheval.training.run_dir import load_run

        return load_run
    raise AttributeError(f"module 'mecheval' has no attribute {name!r}")
