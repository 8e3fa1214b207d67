"""A user's package outside mecheval: one mixer, its parts in sub-modules (test_user_mixer.py)."""
