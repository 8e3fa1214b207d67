"""Model kinds (`models.kinds`): the core never loads the `hf` adapter until a config of its kind is met;
asking for the kind imports it, and it registers itself."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mecheval.models.kinds import model_kind

PROBE = """
import sys
import mecheval.models, mecheval.training
assert not [m for m in sys.modules if m.startswith("mecheval.hf")], "the core imported the hf adapter"
from mecheval.models.kinds import model_kind
kind = model_kind("hf")
from mecheval.hf.build import build, check
assert (kind.build, kind.check) == (build, check)
"""


def test_the_hf_adapter_is_imported_when_its_kind_is_first_asked_for():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_unknown_kind_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown model kind 'onnx'; known: \['hf'\]"):
        model_kind("onnx")
