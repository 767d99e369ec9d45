"""The embedded models' byte tokenizer, as the C side has it.

hy_tokenize_bytes (common/util.c) with the vocabulary hypicctl passes (1 << 30, so
nothing folds): each UTF-8 byte b of the text is token b + 3; ids 0..2 are reserved.
The embedded models (hypic-recall, the `tiny` presets: vocabulary 259) read exactly
these ids; a model with a real tokenizer needs its ids passed instead.

The C function stops at a NUL byte and hypicctl refuses a text file holding one, so a
text with "\\0" is refused here rather than cut short.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import client_error

BYTE_OFFSET = 3  # token id of byte 0
VOCAB = 256 + BYTE_OFFSET


def tokenize(text: str) -> list[int]:
    """The token ids of text: its UTF-8 bytes, each plus 3."""
    raw = text.encode("utf-8")
    if b"\0" in raw:
        raise client_error(f"a NUL character in the text at byte {raw.index(0)}: pass token ids")
    return [b + BYTE_OFFSET for b in raw]


def detokenize(ids: Iterable[int]) -> str:
    """The text of byte-tokenizer ids; an id that is no byte (0..2, over 258) shows as <id>.
    Bytes that are not valid UTF-8 show as U+FFFD."""
    out: list[str] = []
    run = bytearray()
    for t in ids:
        if BYTE_OFFSET <= t < VOCAB:
            run.append(t - BYTE_OFFSET)
            continue
        out.append(run.decode("utf-8", errors="replace"))
        run.clear()
        out.append(f"<{t}>")
    out.append(run.decode("utf-8", errors="replace"))
    return "".join(out)
