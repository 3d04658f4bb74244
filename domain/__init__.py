"""Pure Punto Banco rules: cards, the provably fair shoe, the tableau, payouts, rounds and roads.

Nothing here does I/O or imports anything outside the standard library.
"""
