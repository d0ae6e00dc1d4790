"""Debian's chromium, headless, driven by Selenium through Debian's chromedriver.

Both paths are given, so Selenium Manager never runs (it would look for, and could download, a
browser and a driver of its own); ``SE_OFFLINE`` keeps it offline should anything start it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["CHROMIUM", "CHROMEDRIVER", "chromium"]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def chromium(profile: Path):
    """A headless chromium (``profile``: its user data directory, the test's own)."""
    os.environ["SE_OFFLINE"] = "true"
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).is_file()]
    if missing or shutil.which("chromium") is None:
        raise RuntimeError(f"{', '.join(missing)} missing: scripts/apt-install chromium "
                           f"chromium-driver (scripts/bootstrap does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1100", f"--user-data-dir={profile}",
                "--no-first-run", "--disable-extensions", "--disable-background-networking"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
