"""The Django project of the framework tests: the volcano app, and `reports` (a model, a
migration that takes a while, and a command run under a lock).

Its database is VOLCANO_TEST_DB (a SQLite file the test makes). VOLCANO_TEST_SETTINGS_URL, when
set, becomes the VOLCANO_API_URL setting (the tests check that settings beat the environment).
"""

import os

SECRET_KEY = "framework-tests-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = [
    "volcano.integrations.django",
    "tests.integration.frameworks.apps.django_project.reports",
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("VOLCANO_TEST_DB", ":memory:"),
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
if os.environ.get("VOLCANO_TEST_SETTINGS_URL"):
    VOLCANO_API_URL = os.environ["VOLCANO_TEST_SETTINGS_URL"]
