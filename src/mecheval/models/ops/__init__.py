"""Numerical kernels behind the mixers: each fast op beside a plain reference used in tests."""
