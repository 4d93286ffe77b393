"""The study's tables say what they show and travel with the page: "first 12 of N rows" with
N the CSV's own row count, the whole CSV embedded in report.html (so a copied folder or the
page alone keeps it), unique element ids across the inline SVGs with every #reference
resolving, an ordinary folder mode, and long provenance text once per table."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import urllib.parse
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from bertscope.io import usual_mode
from bertscope.perf import load_profile
from bertscope.report import study_html
from bertscope.report.svg_ids import scope_ids
from bertscope.report.table_notes import factor_notes
from bertscope.studies.sections.context import Section
from bertscope.studies.study import study
from tests.unit.test_study import _quick


class _Page(HTMLParser):
    """Every element's id, every #reference (href, xlink:href, url(#...) in any attribute),
    and each <details> with its summary text and its links."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: list[str] = []
        self.refs: list[str] = []
        self.details: list[dict] = []
        self._summary = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for k, v in attrs:
            if v is None:
                continue
            if k == "id":
                self.ids.append(v)
            if k in ("href", "xlink:href") and v.startswith("#"):
                self.refs.append(v[1:])
            self.refs += re.findall(r"url\(\s*['\"]?#([^)'\"]+)", v)
        if tag == "details":
            self.details.append({"summary": "", "links": []})
        if tag == "summary":
            self._summary = True
        if tag == "a" and self.details:
            self.details[-1]["links"].append(dict(attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag == "summary":
            self._summary = False

    def handle_data(self, data: str) -> None:
        if self._summary:
            self.details[-1]["summary"] += data


def _parse(page: Path) -> _Page:
    p = _Page()
    p.feed(page.read_text(encoding="utf-8"))
    return p


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick predicted-only study of test_study (bert-base on the A100 in bf16), written
    under umask 022."""
    old = os.umask(0o022)
    try:
        return study(_quick(tmp_path_factory.mktemp("tables"))).folder
    finally:
        os.umask(old)


def _embedded(link: dict) -> str:
    head, _, data = link["href"].partition(",")
    assert head == "data:text/csv;charset=utf-8"
    return urllib.parse.unquote(data)


def test_every_table_says_how_many_rows_and_embeds_the_whole_csv(folder: Path,
                                                                  tmp_path: Path) -> None:
    # the page alone, mailed: nothing beside it
    alone = tmp_path / "mailed" / "report.html"
    alone.parent.mkdir()
    shutil.copy(folder / "report.html", alone)
    details = _parse(alone).details
    csvs = sorted((folder / "tables").glob("*.csv"))
    assert len(details) == len(csvs) > 5
    partial = 0
    for d in details:
        (link,) = [a for a in d["links"] if a.get("href", "").startswith("data:")]
        stem = link["download"].removesuffix(".csv")
        text = (folder / "tables" / f"{stem}.csv").read_text(encoding="utf-8")
        assert _embedded(link) == text  # the whole table, byte for byte
        rows = len(pd.read_csv(folder / "tables" / f"{stem}.csv"))
        if rows > 12:
            partial += 1
            assert f"first 12 of {rows:,} rows shown" in d["summary"], d["summary"]
        else:
            assert f"all {rows:,} rows shown" in d["summary"], d["summary"]
    assert partial >= 3  # the quick study has tables longer than the page shows


def test_ids_are_unique_and_every_reference_resolves(folder: Path) -> None:
    page = _parse(folder / "report.html")
    dup = {i for i in page.ids if page.ids.count(i) > 1}
    assert not dup, sorted(dup)[:10]
    assert len(page.ids) > 100  # the inline SVGs' elements are counted
    missing = set(page.refs) - set(page.ids)
    assert not missing, sorted(missing)[:10]
    assert len(page.refs) > 50


def test_the_study_folder_has_the_usual_mode(folder: Path, tmp_path: Path) -> None:
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # umask 022, as mkdir gives
    old = os.umask(0o027)
    try:
        made = Path(tempfile.mkdtemp(dir=tmp_path))
        assert stat.S_IMODE(made.stat().st_mode) == 0o700
        usual_mode(made)
        assert stat.S_IMODE(made.stat().st_mode) == 0o750
        assert os.umask(0o027) == 0o027  # the umask is left as it was
    finally:
        os.umask(old)


def test_provenance_is_said_once_per_table(folder: Path) -> None:
    import json

    for f in (folder / "tables").glob("*.csv"):
        df = pd.read_csv(f)  # plain CSV: no comment lines, no options needed
        for col in df.select_dtypes(exclude="number").columns:
            long = df[col][df[col].map(lambda v: isinstance(v, str) and len(v) > 80)]
            assert not long.duplicated().any(), (f.name, col)
    shares = pd.read_csv(folder / "tables" / "time_shares.csv")
    assert set(shares["models"]) == {"note 1"} and len(shares) > 20
    doc = json.loads((folder / "study.json").read_text())
    time = next(s for s in doc["sections"] if s["key"] == "time")
    # the note is the device's GEMM model, said once
    assert time["table_notes"]["shares"]["models"] == {
        "note 1": load_profile("a100").gemm.source}
    assert {r["models"] for r in time["tables"]["shares"]} == {"note 1"}
    page = (folder / "report.html").read_text(encoding="utf-8")
    assert page.count(load_profile("a100").gemm.source.replace("'", "&#x27;")) <= 2
    readme = (folder / "tables" / "README.md").read_text()
    assert "time_shares.csv" in readme and load_profile("a100").gemm.source in readme


def test_a_table_too_big_to_embed_is_linked_by_its_path(tmp_path: Path,
                                                        monkeypatch) -> None:
    df = pd.DataFrame({"x": range(1000), "y": [f"row {i}" for i in range(1000)]})
    small = pd.DataFrame({"x": [1, 2]})
    sec = Section("s", "S", ["a finding"], {"big": df, "small": small}, "none")
    settings = {"config": {"models": ["m"], "precisions": ["bf16"]},
                "devices": [{"name": "d"}], "optimizer": "lamb"}
    monkeypatch.setattr(study_html, "EMBED_LIMIT", 2000)
    study_html.write_report(tmp_path, [sec], settings)
    big, tiny = _parse(tmp_path / "report.html").details
    assert "first 12 of 1,000 rows shown" in big["summary"]
    assert "too big to embed" in big["summary"]
    assert [a["href"] for a in big["links"]] == ["tables/s_big.csv"]
    assert (tmp_path / "tables" / "s_big.csv").is_file()
    assert "all 2 rows shown" in tiny["summary"]
    assert _embedded(tiny["links"][0]) == "x\n1\n2\n"


def test_scope_ids_renames_ids_and_their_references_only() -> None:
    svg = ('<svg><defs><path id="m1"/><clipPath id="p1"/></defs>'
           '<use xlink:href="#m1"/><use href="#m1"/><g clip-path="url(#p1)" id="patch_1"/>'
           '<a href="#elsewhere"/><g style="clip-path: url(\'#p1\')"/></svg>')
    got = scope_ids(svg, "f2")
    assert got == ('<svg><defs><path id="f2-m1"/><clipPath id="f2-p1"/></defs>'
                   '<use xlink:href="#f2-m1"/><use href="#f2-m1"/>'
                   '<g clip-path="url(#f2-p1)" id="f2-patch_1"/>'
                   '<a href="#elsewhere"/><g style="clip-path: url(\'#f2-p1\')"/></svg>')


def test_factor_notes_replaces_repeated_long_text_only() -> None:
    a, b, once = "a" * 81, "b" * 90, "c" * 100
    df = pd.DataFrame({"src": [a, b, a, "short", b, once], "n": range(6),
                       "tag": ["short"] * 6})
    noted = factor_notes(df)
    assert list(noted.table["src"]) == ["note 1", "note 2", "note 1", "short", "note 2", once]
    assert noted.notes == {"src": {"note 1": a, "note 2": b}}
    assert list(noted.table["tag"]) == ["short"] * 6
    assert list(noted.table["n"]) == list(range(6))
    assert df["src"].iloc[0] == a  # the input is not changed
    assert factor_notes(df[["n", "tag"]]).notes == {}
