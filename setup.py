"""Packages are found, not listed: each top-level folder installs under the `mint` name."""

from setuptools import find_packages, setup

FOLDERS = {
    "mint": "mint",
    "mint.store": "store",
    "mint.runtime": "runtime",
    "mint.migrations": "migrations",
    "mint.examples": "examples",
}

packages = []
for name, folder in FOLDERS.items():
    found = find_packages(folder, exclude=[p.split(".", 1)[1] for p in FOLDERS if p != "mint"])
    packages += [name, *(f"{name}.{sub}" for sub in found)]

setup(packages=packages, package_dir=FOLDERS)
