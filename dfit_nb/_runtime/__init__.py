"""The runtime layer: how dfit_nb's model programs are compiled, cached, padded and packed, never what they compute.

The domain packages (``sim``, ``capture``, ...) call these modules; none of them imports a domain package.

- :mod:`.compile_options`: the XLA options the compile-bound model programs are built with (their compile variants);
- :mod:`.exported`: traced programs kept on disk (``jax.export``) beside JAX's compilation cache;
- :mod:`.compile_cache`: JAX's persistent compilation cache for dfit_nb's programs, switched on by ``dfit_nb.setup()``;
- :mod:`.dispatch`: synchronous CPU dispatch, switched on by ``dfit_nb.setup()``;
- :mod:`.deferred_iri`: a slow import of Altair's validator deferred to its first use, by ``dfit_nb.setup()``;
- :mod:`.padding`: sizes rounded up to shared program sizes, small inputs packed into blocks;
- :mod:`.kept`: the bounded program caches of the model's entry points;
- :mod:`.datasets`: Datasets built from parts already known to be consistent.

Importing this package changes nothing in the process: each setting is made by ``dfit_nb.setup()`` on request.
"""
