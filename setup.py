"""Packages are found, not listed: each top-level folder installs under the `mint` name.

Folders of data alone (the web pages' templates and static files) are found too, as namespace
packages, so that setuptools ships them as packages and does not warn, for each one, that a
folder Python can import is missing from the packages it was given. An editable install (`make`)
also gets setuptools' notice that it is one, as a warning of ten lines: that notice is
information only (its own class says so), and is not shown."""

import warnings

from setuptools import find_namespace_packages, setup
from setuptools.warnings import InformationOnly

warnings.filterwarnings("ignore", category=InformationOnly)

FOLDERS = {
    "mint": "mint",
    "mint.store": "store",
    "mint.runtime": "runtime",
    "mint.migrations": "migrations",
    "mint.examples": "examples",
}

packages = []
for name, folder in FOLDERS.items():
    others = [p.split(".", 1)[1] for p in FOLDERS if p != "mint"]
    skipped = [*others, *(f"{o}.*" for o in others), "__pycache__", "*.__pycache__"]
    found = find_namespace_packages(folder, exclude=skipped)
    packages += [name, *(f"{name}.{sub}" for sub in found)]

setup(packages=packages, package_dir=FOLDERS)
