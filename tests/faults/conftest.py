"""The integration tier's database fixtures, for the fault tests too."""

from tests.integration.conftest import app_pool, fresh_database, migrated_template

__all__ = ["app_pool", "fresh_database", "migrated_template"]
