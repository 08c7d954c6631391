"""The store's offline tools behind `petrel store check|dump|repair`.

They read (and repair rewrites) a store directory's files directly, with the broker
stopped; they never open a MessageStore and never run inside the broker. The engine
(libs.store) does not import them.
"""
