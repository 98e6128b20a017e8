"""``Record``: one decoded Avro record as role code sees it — a plain dict with the schema's field
names (``schemas/*.avsc``; enums are strings, times epoch milliseconds). The codec turns bytes into
these and back; nothing outside ``workers/codec`` sees the bytes."""

from __future__ import annotations

from typing import Any

Record = dict[str, Any]
