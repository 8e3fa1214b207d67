"""The single-query document layout AR and ATR share: `<bos> context <eos> q a <eos>`.

Token ids: PAD 0 (right padding), BOS 1, EOS 2; a task's own tokens start at N_SPECIAL = 3. The
answer `a` is predicted at the position of the query token `q`, which is corruptible like the
context's key and value.
"""

from __future__ import annotations

from mecheval.tasks.base import Task

PAD, BOS, EOS = 0, 1, 2
N_SPECIAL = 3
SPECIAL_NAMES = {PAD: "<pad>", BOS: "<bos>", EOS: "<eos>"}  # id -> text, for `decode`


class DocumentTask(Task):
    """A task whose documents use the layout above (AR, ATR)."""

    @property
    def special_tokens(self) -> dict[str, int]:
        return {"PAD": PAD, "BOS": BOS, "EOS": EOS}

    @property
    def corruptible_roles(self) -> tuple[str, ...]:
        return ("key", "value", "query")
