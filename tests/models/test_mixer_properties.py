"""Mixer-level properties shared by DeltaNet, Mamba and H3: the conv slot, causality, and a gradient
to every parameter (each mixer's own checks: test_deltanet.py, test_mamba.py, test_h3.py)."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .mixer_checks import (
    FAST_OPTIONS,
    assert_causal,
    assert_conv_slot,
    assert_every_parameter_gets_a_gradient,
    inputs,
    make_mixer,
)


class Case(NamedTuple):
    causal_convs: tuple  # the d_conv values causality is checked at
    causal_T: int  # longest sequence of the causality check
    grad_T: int  # sequence length of the gradient check


CASES = {
    "deltanet": Case((0, 4, "long"), 40, 70),  # 70: across a chunk boundary
    "mamba": Case((0, 2, 4, "long"), 40, 40),
    "h3": Case((0, 3, "long"), 30, 20),
}


@pytest.mark.parametrize("name", CASES)
def test_conv_slot(name):
    assert_conv_slot(name, **FAST_OPTIONS[name])


@pytest.mark.parametrize("name,conv", [(m, c) for m, case in CASES.items() for c in case.causal_convs])
@settings(max_examples=8, deadline=None)
@given(data=st.data(), seed=st.integers(0, 999))
def test_causal(name, conv, data, seed):
    T = data.draw(st.integers(2, CASES[name].causal_T), label="T")
    m = make_mixer(name, conv=conv, seed=seed, **FAST_OPTIONS[name])
    assert_causal(m, inputs(2, T, 16, seed), data.draw(st.integers(0, T - 2), label="t"))


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("conv", [0, 4])
def test_gradients_flow_to_every_parameter(name, conv):
    m = make_mixer(name, conv=conv, **FAST_OPTIONS[name])
    assert_every_parameter_gets_a_gradient(m, inputs(2, CASES[name].grad_T, 16, 0))
