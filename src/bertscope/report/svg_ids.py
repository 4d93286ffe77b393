"""Element ids of an SVG made unique within a page that inlines several.

matplotlib names the elements of every SVG it writes the same way ("patch_1", "axes_1",
glyphs "DejaVuSans-48", clip paths and markers by hash), so two figures inlined in one HTML
page share ids, and a reference (`url(#p1)`, `xlink:href="#m2"`) may resolve to the other
figure's element. `scope_ids` gives every id of one SVG a prefix and rewrites every
reference to those ids to match; references to ids the SVG does not define are left alone.
"""

from __future__ import annotations

import re

_ID = re.compile(r"""(\sid=)(["'])(.*?)\2""")
_URL = re.compile(r"""url\(\s*(["']?)#([^)"']+)\1\s*\)""")
_HREF = re.compile(r"""(\s(?:xlink:)?href=)(["'])#(.*?)\2""")


def scope_ids(svg: str, prefix: str) -> str:
    """`svg` with each id X defined in it renamed `prefix`-X, and each `url(#X)`,
    `href="#X"` and `xlink:href="#X"` that names one of them rewritten the same way."""
    ids = {m.group(3) for m in _ID.finditer(svg)}
    if not ids:
        return svg

    def new(name: str) -> str:
        return f"{prefix}-{name}" if name in ids else name

    svg = _ID.sub(lambda m: f"{m.group(1)}{m.group(2)}{new(m.group(3))}{m.group(2)}", svg)
    svg = _URL.sub(lambda m: f"url({m.group(1)}#{new(m.group(2))}{m.group(1)})", svg)
    return _HREF.sub(lambda m: f"{m.group(1)}{m.group(2)}#{new(m.group(3))}{m.group(2)}",
                     svg)


__all__ = ["scope_ids"]
