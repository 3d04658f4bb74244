"""Which events are significant to a regulator: the rules live with the read model that keeps
them (service/application/read_models/significant.py), so the projector can apply them too."""

from service.application.read_models.significant import (
    APIKEY,
    KINDS,
    LIMIT,
    MALFUNCTION,
    MODERATION,
    OPERATOR,
    OPERATOR_ROLES,
    RECONCILIATION_KIND,
    RECOVERY_KIND,
    SIGNIFICANT_TYPES,
    VOID,
    kind_of,
)

__all__ = [
    "APIKEY",
    "KINDS",
    "LIMIT",
    "MALFUNCTION",
    "MODERATION",
    "OPERATOR",
    "OPERATOR_ROLES",
    "RECONCILIATION_KIND",
    "RECOVERY_KIND",
    "SIGNIFICANT_TYPES",
    "VOID",
    "kind_of",
]
