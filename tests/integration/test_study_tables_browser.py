"""The study's tables in a real browser, from a moved folder and from report.html mailed
alone: every table opens to its first rows, says how many of how many, and its whole CSV is
reachable from the page itself (the embedded link the browser sees decodes to every row)."""

from __future__ import annotations

import io
import re
import shutil
import urllib.parse
from pathlib import Path

import pandas as pd
import pytest

from bertscope.studies.study import StudyConfig, study
from tests.integration.test_study_browser import CHROMIUM, DRIVER, _wait_for_parse, browser

pytestmark = pytest.mark.skipif(not (Path(CHROMIUM).exists() and Path(DRIVER).exists()),
                                reason="needs Debian's chromium and chromium-driver "
                                       "(apt-get install chromium chromium-driver)")


def test_every_tables_full_rows_are_reachable_from_a_moved_or_mailed_report(tmp_path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    res = study(StudyConfig(output=tmp_path / "study", models=("bert-base",),
                            devices=("a100",), precisions=("bf16",), measure=False))
    moved = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(res.folder, moved)
    mailed = tmp_path / "inbox" / "report.html"
    mailed.parent.mkdir()
    shutil.copy(res.folder / "report.html", mailed)
    shutil.rmtree(res.folder)  # nothing left where it was written
    want = {f.stem: len(pd.read_csv(f)) for f in (moved / "tables").glob("*.csv")}
    drv = browser(tmp_path)
    try:
        for page in (moved / "report.html", mailed):
            drv.get(page.resolve().as_uri())
            _wait_for_parse(drv, len(res.sections))
            blocks = drv.find_elements(By.TAG_NAME, "details")
            assert len(blocks) == len(want)
            seen = set()
            for d in blocks:
                summary = d.find_element(By.TAG_NAME, "summary")
                link = summary.find_element(By.CSS_SELECTOR, "a[download]")
                stem = link.get_attribute("download").removesuffix(".csv")
                head, _, data = link.get_attribute("href").partition(",")
                assert head.startswith("data:text/csv")
                rows = pd.read_csv(io.StringIO(urllib.parse.unquote(data)))
                assert len(rows) == want[stem]  # the whole table, from the page alone
                shown = min(12, want[stem])
                total = f"{want[stem]:,}"
                assert re.search(rf"(first {shown} of {total}|all {total}) rows",
                                 summary.text), summary.text
                drv.execute_script("arguments[0].scrollIntoView()", summary)
                # one click on the summary's label (its disclosure marker, left of the
                # link) opens the first rows
                ActionChains(drv).move_to_element_with_offset(
                    summary, -summary.size["width"] // 2 + 6, 0).click().perform()
                body = d.find_elements(By.CSS_SELECTOR, "table tbody tr")
                assert len(body) == shown and all(r.is_displayed() for r in body)
                seen.add(stem)
            assert seen == set(want)
    finally:
        drv.quit()
