"""Random bits for the rollouts: threefry-2x32 as straight-line code, and keys that use it.

XLA's CPU backend runs jax's ``threefry2x32`` primitive as a rolled loop of small kernels;
written out (:func:`threefry2x32`), a bulk draw is one fused kernel. Two uses:

* **uniforms from words** (the fast path of :func:`fhc_jax.rollout.rollout` and of the
  learners' tabular rollout): :func:`uniform_pairs` draws two float32 uniforms per element from
  ONE threefry block, mapped exactly as ``jax.random.uniform`` maps its bits
  (:func:`uniform_from_bits`);
* **fast keys** (policies that draw from a key inside the scan): :data:`UNROLLED_THREEFRY`
  registers the same algorithm as a PRNG implementation, so that :func:`fast_key` can rewrap a
  threefry key's data with it and give bit-identical random streams, faster;
  :func:`restore_keys` gives keys back in the caller's implementation.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend.random import define_prng_impl, threefry_prng_impl

Array = jax.Array


# ----------------------------------------------------------------------------- random words

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotl(x: Array, d: int) -> Array:
    return jax.lax.shift_left(x, jnp.uint32(d)) | jax.lax.shift_right_logical(x, jnp.uint32(32 - d))


def threefry2x32(k1: Array, k2: Array, x1: Array, x2: Array) -> tuple[Array, Array]:
    """Threefry-2x32 block cipher (20 rounds, Salmon et al. 2011) as straight-line jnp code.

    The same function as jax's ``threefry2x32`` primitive, which XLA's CPU backend runs as a
    rolled loop of small kernels; unrolled, a bulk draw is one fused kernel. uint32 arrays
    (broadcast together); returns the block's two output words.
    """
    ks = (k1, k2, k1 ^ k2 ^ jnp.uint32(0x1BD11BDA))
    x1, x2 = x1 + k1, x2 + k2
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = _rotl(x2, r) ^ x1
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + jnp.uint32(i + 1)
    return x1, x2


def uniform_from_bits(bits: Array) -> Array:
    """float32 uniforms in [0, 1) from uint32 words, exactly as ``jax.random.uniform`` maps its
    random bits (top 23 bits as the mantissa): ``uniform(key) == uniform_from_bits(bits(key))``."""
    mantissa = jax.lax.shift_right_logical(bits, jnp.uint32(9)) | jnp.uint32(0x3F800000)
    return jax.lax.bitcast_convert_type(mantissa, jnp.float32) - 1.0


def uniform_pairs(key: Array, shape: tuple[int, ...]) -> Array:
    """Two independent float32 uniforms in [0, 1) per element from ONE threefry block (its two
    32-bit output words), packed as complex64 ``u1 + 1j * u2`` of ``shape``.

    Read ``.real`` and ``.imag`` where they are consumed (e.g. inside a ``lax.scan`` body): XLA's
    CPU backend evaluates a fused elementwise computation once per output array, so returning
    two separate arrays would compute every block twice. Half the blocks of two
    ``jax.random.uniform`` calls (whose 32-bit draws XOR the two words of a block).
    """
    key, impl = fast_key(typed_key(key))
    if impl == "threefry2x32":
        data = jax.random.key_data(key)
        ctr_hi, ctr_lo = _counters(tuple(shape))
        words = threefry2x32(data[0], data[1], ctr_hi, ctr_lo)
    else:
        words = jax.random.bits(key, (2, *shape), jnp.uint32)
    return jax.lax.complex(*(uniform_from_bits(w) for w in words))


def typed_key(key: Array) -> Array:
    """A typed key (legacy raw uint32[2] keys are wrapped with the default implementation)."""
    return key if jnp.issubdtype(key.dtype, jax.dtypes.prng_key) else jax.random.wrap_key_data(key)


# ----------------------------------------------------------------------------- fast keys
# For policies without the fast protocol, which draw from a key inside the scan: the same
# threefry algorithm registered as a PRNG implementation (jax's partitionable split,
# random_bits and fold_in), so wrapping a threefry key's data with it gives bit-identical
# random streams computed as one fused kernel instead of a rolled loop of small ones.


def _counters(shape: tuple[int, ...]) -> tuple[Array, Array]:
    n = math.prod(shape)
    if n >= 2**32:
        raise NotImplementedError("more than 2**32 random values from one key")
    return jnp.zeros(shape, jnp.uint32), jax.lax.iota(jnp.uint32, n).reshape(shape)


def _split(key: Array, shape: tuple[int, ...]) -> Array:
    return jnp.stack(threefry2x32(key[0], key[1], *_counters(shape)), axis=-1)


def _random_bits(key: Array, bit_width: int, shape: tuple[int, ...]) -> Array:
    b1, b2 = threefry2x32(key[0], key[1], *_counters(shape))
    if bit_width == 64:
        return (b1.astype(jnp.uint64) << 32) | b2.astype(jnp.uint64)
    bits = b1 ^ b2
    return bits if bit_width == 32 else bits.astype({8: jnp.uint8, 16: jnp.uint16}[bit_width])


def _fold_in(key: Array, data: Array) -> Array:
    return jnp.stack(threefry2x32(key[0], key[1], jnp.zeros((), jnp.uint32), jnp.asarray(data, jnp.uint32)))


UNROLLED_THREEFRY = define_prng_impl(
    key_shape=(2,),
    seed=threefry_prng_impl.seed,
    split=_split,
    random_bits=_random_bits,
    fold_in=_fold_in,
    name="threefry2x32_unrolled",
    tag="fu",
)


def _rewrap(keys: Array, impl) -> Array:
    return jax.random.wrap_key_data(jax.random.key_data(keys), impl=impl)


def fast_key(key: Array) -> tuple[Array, Any]:
    """(key with the unrolled implementation if that gives the same stream, caller's impl)."""
    impl = jax.random.key_impl(key)
    if impl == "threefry2x32" and jax.config.jax_threefry_partitionable:
        return _rewrap(key, UNROLLED_THREEFRY), impl
    return key, impl


def restore_keys(tree: Any, impl) -> Any:
    """``tree`` with every typed key rewrapped in ``impl`` (the caller's implementation, as
    :func:`fast_key` returned it); other leaves as they are."""
    is_key = lambda x: jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
    return jax.tree.map(lambda x: _rewrap(x, impl) if is_key(x) else x, tree)
