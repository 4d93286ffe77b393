"""Screenshot the first screen of a study report for the README (docs/study_report.png).

    python bench/study_screenshot.py [REPORT_FOLDER]   # default: runs `bertscope study` first

Drives Debian's chromium through selenium, as tests/integration/test_study_browser.py does.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    if len(sys.argv) > 1:
        folder = Path(sys.argv[1])
    else:
        from bertscope.studies.study import StudyConfig, study

        folder = Path(tempfile.mkdtemp()) / "study"
        study(StudyConfig(output=folder))
    with tempfile.TemporaryDirectory() as profile:
        opts = webdriver.ChromeOptions()
        opts.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--window-size=1280,1100", f"--user-data-dir={profile}"):
            opts.add_argument(flag)
        drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        try:
            drv.get((folder / "report.html").resolve().as_uri())
            out = ROOT / "docs" / "study_report.png"
            drv.save_screenshot(str(out))
            print(f"wrote {out}")
        finally:
            drv.quit()


if __name__ == "__main__":
    main()
