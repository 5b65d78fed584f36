"""The chunk engine both formats share.

``grid`` (chunk geometry), ``indexing`` (numpy selections -> chunk parts),
``chunkstore`` (the contract a format's chunk storage meets), ``buffered`` (a chunk
store that collects writes and stores each unit once), ``values`` (exact casts and
fill checks), ``engine`` (:class:`ChunkedArray`: reads and writes of selections) and
``dask`` (Dask graphs over an engine: blocks of storage units, writes by unit).
Formats import the modules they need; this package's ``__init__`` imports nothing.
"""
