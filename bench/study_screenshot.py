"""Screenshots of a study report for the docs: the page's first screen
(docs/study_report.png) and every section, one PNG each (docs/study/NN-<key>.png), small
(scaled to `WIDTH` pixels, quantized to `COLORS` colours) so the repository stays lean.

    python bench/study_screenshot.py [REPORT_FOLDER]   # default: runs `bertscope study` first

Drives Debian's chromium through selenium, as tests/integration/test_study_browser.py does
(`apt-get install chromium chromium-driver`). Old section screenshots are removed first, so
the folder always holds this report's sections and nothing else.
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SECTIONS = DOCS / "study"
WIDTH = 760
"""Width of every screenshot, pixels."""
COLORS = 96
"""Colours of every screenshot's palette (text, tables and figures stay legible)."""


def shrink(png: bytes, out: Path) -> int:
    """Scale a screenshot to `WIDTH`, quantize it to `COLORS` colours, write it; its bytes."""
    img = Image.open(io.BytesIO(png)).convert("RGB")
    if img.width > WIDTH:
        img = img.resize((WIDTH, round(img.height * WIDTH / img.width)), Image.LANCZOS)
    img = img.quantize(colors=COLORS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    img.save(out, format="PNG", optimize=True)
    return out.stat().st_size


def main() -> None:
    """Run (or take) a study report and write the screenshots."""
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
                     "--disable-sync", "--window-size=1200,1000", "--hide-scrollbars",
                     f"--user-data-dir={profile}"):
            opts.add_argument(flag)
        drv = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
        try:
            drv.get((folder / "report.html").resolve().as_uri())
            total = shrink(drv.get_screenshot_as_png(), DOCS / "study_report.png")
            # a window as tall as the page: a section's screenshot is never cut at the fold
            height = drv.execute_script("return document.documentElement.scrollHeight")
            drv.set_window_size(1200, height + 200)
            SECTIONS.mkdir(exist_ok=True)
            for old in SECTIONS.glob("*.png"):
                old.unlink()
            for i, sec in enumerate(drv.find_elements(By.CSS_SELECTOR, "section"), 1):
                key = sec.get_attribute("id")
                total += shrink(sec.screenshot_as_png, SECTIONS / f"{i:02d}-{key}.png")
            print(f"wrote {DOCS / 'study_report.png'} and {i} sections under {SECTIONS} "
                  f"({total / 1024:.0f} KiB)")
        finally:
            drv.quit()


if __name__ == "__main__":
    main()
