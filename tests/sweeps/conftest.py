import pytest


@pytest.fixture
def base(tiny_run):
    """The sweeps' base config: the suite's tiny AR run."""
    return tiny_run
