"""The colours of every figure: one colour per op category, per GEMM pass and per series,
colour-blind safe and the same in every plot (the study's figures, the CLI's roofline).

Categories take the Okabe-Ito set (Okabe & Ito, "Color Universal Design", 2008) for the
categories that dominate a Transformer iteration and Paul Tol's "muted" set (Tol, "Colour
Schemes", SRON/EPS/TN/09-002) for the rest; dropout (yellow), loss (black) and the optimizer
(vermillion) are three different hues. Series with no category (devices, optimizers,
sequence lengths, hardware knobs) take Okabe-Ito in order (`series`).

Plain hex strings: no matplotlib import, so any renderer (or a new study section) can use
them.
"""

from __future__ import annotations

from bertscope.taxonomy import Category, Phase

CATEGORY_COLORS: dict[Category, str] = {
    Category.GEMM: "#0072B2",           # Okabe-Ito blue
    Category.BATCHED_GEMM: "#56B4E9",   # Okabe-Ito sky blue
    Category.CONVOLUTION: "#332288",    # Tol indigo
    Category.SOFTMAX: "#E69F00",        # Okabe-Ito orange
    Category.LAYERNORM: "#009E73",      # Okabe-Ito bluish green
    Category.RMSNORM: "#44AA99",        # Tol teal
    Category.BATCHNORM: "#117733",      # Tol green
    Category.DROPOUT: "#F0E442",        # Okabe-Ito yellow
    Category.ACTIVATION: "#CC79A7",     # Okabe-Ito reddish purple
    Category.ELEMENTWISE: "#DDCC77",    # Tol sand
    Category.EMBEDDING: "#882255",      # Tol wine
    Category.REDUCTION: "#999933",      # Tol olive
    Category.LOSS: "#000000",           # Okabe-Ito black
    Category.OPTIMIZER: "#D55E00",      # Okabe-Ito vermillion
    Category.COMMUNICATION: "#CC6677",  # Tol rose
    Category.DATA_MOVEMENT: "#888888",  # grey
    Category.OTHER: "#DDDDDD",          # Tol pale grey
}
"""Each op category's colour (every `Category` has one, no two alike)."""

PASS_COLORS: dict[Phase, str] = {
    Phase.FORWARD: "#0072B2",           # Okabe-Ito blue
    Phase.BACKWARD_DATA: "#E69F00",     # Okabe-Ito orange
    Phase.BACKWARD_WEIGHT: "#009E73",   # Okabe-Ito bluish green
    Phase.BACKWARD: "#CC79A7",          # Okabe-Ito reddish purple
}
"""A GEMM pass's colour: forward, data gradient, weight gradient (plain backward where a
producer cannot tell the two)."""

SERIES_COLORS: tuple[str, ...] = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7",
                                  "#56B4E9", "#F0E442", "#000000", "#332288", "#882255",
                                  "#44AA99", "#999933")
"""Okabe-Ito in order, then Tol muted: the n-th series of a figure."""


def category_color(category: str | Category) -> str:
    """The colour of a category, given as the enum or its value; an unknown name is grey."""
    try:
        return CATEGORY_COLORS[Category(category)]
    except ValueError:
        return CATEGORY_COLORS[Category.OTHER]


def series(i: int) -> str:
    """The colour of the `i`-th series of a figure (cycling past the last)."""
    return SERIES_COLORS[i % len(SERIES_COLORS)]


__all__ = ["CATEGORY_COLORS", "PASS_COLORS", "SERIES_COLORS", "category_color", "series"]
