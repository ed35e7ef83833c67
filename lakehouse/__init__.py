"""lakehouse: a TrinityLake-style lakehouse whose tree and versions live in kvstore.

Not built yet: it lands with the lakehouse issue (it builds on kvstore's
transactions and retention). Until then this package only reserves the name.
"""
