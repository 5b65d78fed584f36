"""The Neuroglancer precomputed format over the chunk engine.

``info`` (the info JSON), ``codecs/`` (raw, jpeg, png, compressed_segmentation, compresso,
crackle chunks), ``unsharded`` (one file per chunk) and ``sharded`` (chunks in
``neuroglancer_uint64_sharded_v1`` shards, keyed by compressed Morton code) chunk stores,
``raw_files`` (raw chunk files read straight into the output) and ``volume``
(:class:`Volume`, one scale sliceable like a numpy array).
"""
