"""Optional libraries, checked before any work starts: which library a feature needs and the
pip command that installs it.

A plain `pip install` of bertscope brings everything the main job (`bertscope study`) and the
predictions need (pyproject.toml's `dependencies`: numpy, pandas, matplotlib, pyarrow, ...).
PyTorch (measuring) and Hugging Face transformers (`--hf` models) stay optional: a user keeps
their own CUDA/ROCm build of torch. Every command asks `require` for what the options it was
given need, before it reads, measures or writes anything; a missing library is one line
naming the feature, the library and the real pip command (`pip install torch`), never a
traceback after minutes of work. The check uses `importlib.util.find_spec`: nothing is
imported, so checking costs nothing (the CLI stays torch-free)."""

from __future__ import annotations

import importlib.util

from bertscope.errors import BertscopeError

INSTALL: dict[str, str] = {
    "torch": "pip install torch",
    "transformers": "pip install transformers",
    "matplotlib": "pip install matplotlib",
    "pyarrow": "pip install pyarrow",
    "distributed": "pip install distributed",  # PyPI `distributed` depends on dask
}
"""Import name of each library a feature may need -> the pip command that installs it (the
real package index names: bertscope itself is installed from its source, so a hint naming
one of its extras is no command a user can run)."""

FORMATS: dict[str, str] = {"parquet": "pyarrow"}
"""Export format -> the library that writes it (pandas writes Parquet through pyarrow)."""


def installed(library: str) -> bool:
    """Whether `library` (an import name) can be imported, without importing it. A module
    set to None in `sys.modules` (import blocked) counts as missing."""
    try:
        return importlib.util.find_spec(library) is not None
    except (ImportError, ValueError):  # a parent that fails, or a module without a spec
        return False


def missing(*libraries: str) -> list[str]:
    """The libraries among `libraries` that are not installed, in the order given."""
    return [lib for lib in libraries if not installed(lib)]


def install_command(*libraries: str) -> str:
    """The one pip command that installs `libraries` (`pip install a b`)."""
    unknown = [lib for lib in libraries if lib not in INSTALL]
    if unknown:
        raise KeyError(f"no install command known for {', '.join(unknown)}; add it to INSTALL")
    return "pip install " + " ".join(INSTALL[lib].removeprefix("pip install ")
                                     for lib in libraries)


def require(feature: str, *libraries: str, otherwise: str = "") -> None:
    """Refuse `feature` in one line when any of `libraries` is missing: "FEATURE needs
    torch, which is not installed: pip install torch" (then "; OTHERWISE" when given: what
    to do instead). Call it before any work starts."""
    gone = missing(*libraries)
    if gone:
        names = " and ".join(gone)
        verb = "is" if len(gone) == 1 else "are"
        rest = f"; {otherwise}" if otherwise else ""
        raise BertscopeError(f"{feature} needs {names}, which {verb} not installed: "
                             f"{install_command(*gone)}{rest}")


def require_format(fmt: str, feature: str = "") -> None:
    """Refuse writing the export format `fmt` (csv, json, jsonl, parquet) when the library that
    writes it is missing (`FORMATS`); a format without one needs nothing."""
    name = str(fmt).lower()
    library = FORMATS.get(name)
    if library is not None:
        require(feature or f"{name} output", library, otherwise="or write a .csv file")


__all__ = ["FORMATS", "INSTALL", "install_command", "installed", "missing", "require",
           "require_format"]
