"""The JSON every successful answer is: `to_jsonable(result)`, the same rendering as `--json`."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse

from mint.jsonable import to_jsonable


class MintJSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(
            to_jsonable(content), ensure_ascii=False, allow_nan=False, separators=(",", ":")
        ).encode("utf-8")


def answer(result: Any, status_code: int = 200) -> MintJSON:
    return MintJSON(result, status_code=status_code)
