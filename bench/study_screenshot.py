"""Screenshots of a study report for the docs: the page's first screen
(docs/study_report.png) and every section, one PNG each (docs/study/NN-<key>.png), small
(scaled to `WIDTH` pixels, quantized to `COLORS` colours) so the repository stays lean.

    python bench/study_screenshot.py [REPORT_FOLDER]   # default: runs `bertscope study` first
    python bench/study_screenshot.py --only recipes,how  # those sections' screenshots only

Drives Debian's chromium through selenium, as tests/integration/test_study_browser.py does
(`apt-get install chromium chromium-driver`). Old section screenshots are removed first, so
the folder always holds this report's sections and nothing else; with `--only KEY,...` only
those sections are written (an older screenshot of the same section under another number
removed) and the first screen and the other sections are left as they are.
"""

from __future__ import annotations

import argparse
import io
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", type=Path, help="a study report folder (default: "
                    "run the default study first)")
    ap.add_argument("--only", default="", help="comma list of section keys (the ids in "
                    "report.html: time, bound, ..., recipes, how) to write; default: all")
    args = ap.parse_args()
    only = {k for k in args.only.split(",") if k}
    if args.folder is not None:
        folder = args.folder
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
            total = 0
            if not only:
                total = shrink(drv.get_screenshot_as_png(), DOCS / "study_report.png")
            # a window as tall as the page: a section's screenshot is never cut at the fold
            height = drv.execute_script("return document.documentElement.scrollHeight")
            drv.set_window_size(1200, height + 200)
            sections = drv.find_elements(By.CSS_SELECTOR, "section")
            keys = [sec.get_attribute("id") for sec in sections]
            missing = only - set(keys)
            if missing:  # before any file is touched
                raise SystemExit(f"no section {', '.join(sorted(missing))} in the report "
                                 f"(it has {', '.join(keys)})")
            SECTIONS.mkdir(exist_ok=True)
            for old in SECTIONS.glob("*.png"):
                if not only or old.stem.split("-", 1)[1] in only:
                    old.unlink()
            written = []
            for i, (sec, key) in enumerate(zip(sections, keys, strict=True), 1):
                if only and key not in only:
                    continue
                out = SECTIONS / f"{i:02d}-{key}.png"
                total += shrink(sec.screenshot_as_png, out)
                written.append(out.name)
            first = "" if only else f"{DOCS / 'study_report.png'} and "
            print(f"wrote {first}{len(written)} sections under {SECTIONS} "
                  f"({', '.join(written)}; {total / 1024:.0f} KiB)")
        finally:
            drv.quit()


if __name__ == "__main__":
    main()
