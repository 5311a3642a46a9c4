"""Debian's Chromium driven by Selenium, for the pages' tests and the docs' screenshots.

`chromium(profile)` starts a headless browser (`/usr/bin/chromium`, `/usr/bin/chromedriver`;
`make browser` installs them, nothing downloads a browser of its own) with its own profile
folder; `wait_for(browser, condition)` waits until a condition holds.
"""

from __future__ import annotations

from pathlib import Path

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def chromium(profile: Path, size: str = "1280,1300"):
    """A headless Chromium with the window SIZE ("width,height") and the profile PROFILE."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM  # Debian's Chromium: nothing downloads a browser
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--window-size={size}",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def wait_for(browser, condition, timeout: float = 20.0):
    """Wait until CONDITION() is truthy (exceptions count as not yet), with a deadline."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.support.ui import WebDriverWait

    def check(_):
        try:
            return condition()
        except (WebDriverException, LookupError, AssertionError):
            return False

    return WebDriverWait(browser, timeout).until(check)


def sign_in(browser, url: str, token: str) -> None:
    """Forget the cookies, then sign in at URL (the registry's) through the form with TOKEN."""
    browser.delete_all_cookies()
    browser.get(url + "/signin")
    browser.find_element("id", "token").send_keys(token)
    browser.find_element("id", "signin").click()
    wait_for(browser, lambda: browser.find_element("id", "who").text)
