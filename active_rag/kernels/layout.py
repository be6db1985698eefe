"""The packed layout of the decode kernels, made and read with torch (no compiled code needed).

A layer's weights are stored in the order the kernel (``csrc/decode_kernel.cpp``) reads them, the same on every CPU,
so the converted-model cache holds them as they are used and a load copies nothing but the file:

- outputs in tiles of :data:`TILE` (the last one padded), a tile's bytes contiguous, tiles one after another (threads
  take runs of whole tiles);
- within a tile, chunks of 64 bytes: 16 lanes (outputs) of 4 bytes. int8: the bytes of lane ``l`` in chunk ``c`` are
  inputs ``4c .. 4c + 3`` of output ``l``, stored as ``q + 128`` (unsigned, what ``vpdpbusd`` multiplies); the
  inputs are padded to a multiple of :data:`GROUP` with zeros. int4: byte ``i`` of lane ``l`` in chunk ``c`` holds
  input ``8c + i`` in its low nibble and ``8c + 4 + i`` in its high nibble, so one AND and one shift give two vectors
  of 16 outputs' bytes;
- int4 scales: per tile and group of :data:`GROUP` inputs, the 16 outputs' bfloat16 steps, then their 16 zeros, one
  64-byte line the kernel reads after the group's 256 bytes of nibbles (``w = (q - 8) * step + zero``, torch's
  convention), or a GGUF's Q4_K scales as they are stored, 6-bit integers under float16 constants per 256 inputs
  (:func:`pack_int4k`); int8 scales: one float32 per output.

torch's own kernels (the fallback where the library is not built) read other layouts, built from these at load
(:func:`unpack_int4`, :func:`unpack_int8`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TILE = 16
"""Outputs per tile: the lanes of one AVX-512 vector of 32-bit sums."""

GROUP = 32
"""Inputs per activation scale (and per int4 weight scale)."""

SUPER = 256
"""Inputs per superblock of Q4_K's scales (:func:`pack_int4k`): 8 groups."""


def tiles_count(out_features: int) -> int:
    return -(-out_features // TILE)


def padded_inputs(in_features: int) -> int:
    """``in_features`` rounded up to a multiple of :data:`GROUP` (the int8 layout's padded width)."""
    return -(-in_features // GROUP) * GROUP


def _nibble_tiles(codes: torch.Tensor) -> torch.Tensor:
    """``codes`` uint8 ``[out, in]`` in [0, 15] -> the int4 tiles, uint8 ``[tiles, in / 8, 64]``."""
    out_features, in_features = codes.shape
    count, pad = tiles_count(out_features), -out_features % TILE
    c = F.pad(codes.to(torch.uint8), (0, 0, 0, pad)).view(count, TILE, in_features // 8, 2, 4)
    c = c.permute(0, 2, 1, 4, 3)  # [tile, chunk, lane, i, nibble]
    return (c[..., 0] | (c[..., 1] << 4)).reshape(count, in_features // 8, 64).contiguous()


def _lanes(values: torch.Tensor, count: int) -> torch.Tensor:
    """``[out, n]`` -> ``[tiles, n, 16]``: each tile's 16 outputs side by side (the last tile padded with zeros)."""
    pad = count * TILE - values.shape[0]
    return F.pad(values, (0, 0, 0, pad)).view(count, TILE, values.shape[1]).transpose(1, 2)


def pack_int4(codes: torch.Tensor, step: torch.Tensor, zero: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``codes`` uint8 ``[out, in]`` in [0, 15], ``step`` and ``zero`` ``[out, in / 32]`` -> ``(tiles uint8
    [tiles, in / 8, 64], scales bfloat16 [tiles, in / 32, 2, 16])``."""
    out_features, in_features = codes.shape
    if in_features % GROUP:
        raise ValueError(f"int4 needs in_features divisible by {GROUP}, got {in_features}")
    count = tiles_count(out_features)
    scales = torch.stack([_lanes(step.float(), count), _lanes(zero.float(), count)], dim=2)
    return _nibble_tiles(codes), scales.to(torch.bfloat16).contiguous()


def pack_int4k(codes: torch.Tensor, sc: torch.Tensor, m: torch.Tensor, d: torch.Tensor,
               dmin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An int4 weight with Q4_K's scales (a GGUF's Q4_K tensor as it is stored: ``w = d * sc * q - dmin * m``):
    ``codes`` uint8 ``[out, in]`` in [0, 15], ``sc`` and ``m`` ``[out, in / 32]`` in [0, 63], ``d`` and ``dmin``
    float16 ``[out, in / 256]`` -> ``(tiles uint8 [tiles, in / 8, 64]`` (:func:`pack_int4`'s), ``scales uint8
    [tiles, in / 256, 320])``.

    Per tile and superblock of :data:`SUPER` inputs, 320 bytes: the 16 outputs' ``d`` (float16), their ``dmin``,
    then for each of its 8 groups the 16 outputs' ``sc`` (a byte each), then for each group their ``m``: 2.5 bytes an
    output and group where :func:`pack_int4`'s bfloat16 step and zero take 4 (4.625 bits a weight against 5). The
    kernel takes ``step = sc * d`` and ``zero = 8 * step - m * dmin`` (every product exact in float32)."""
    out_features, in_features = codes.shape
    if in_features % SUPER:
        raise ValueError(f"int4 with Q4_K scales needs in_features divisible by {SUPER}, got {in_features}")
    if int(sc.max()) > 63 or int(m.max()) > 63:
        raise ValueError("Q4_K scales and mins are 6-bit integers (at most 63)")
    count, supers = tiles_count(out_features), in_features // SUPER

    def halves(values: torch.Tensor) -> torch.Tensor:  # float16 [out, supers] -> uint8 [tiles, supers, 32]
        return _lanes(values.to(torch.float16), count).contiguous().view(torch.uint8)

    def bytes_of(values: torch.Tensor) -> torch.Tensor:  # [out, groups] -> uint8 [tiles, supers, 128]
        return _lanes(values.to(torch.uint8), count).reshape(count, supers, 8 * TILE)

    scales = torch.cat([halves(d), halves(dmin), bytes_of(sc), bytes_of(m)], dim=2).contiguous()
    return _nibble_tiles(codes), scales


def unpack_int4k(tiles: torch.Tensor, scales: torch.Tensor, out_features: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The codes of :func:`pack_int4k`'s tiles and the float32 step and zero per group the kernel computes from its
    scales: ``(codes uint8 [out, in], step [out, groups], zero [out, groups])``."""
    count, supers, _ = scales.shape
    d = scales[:, :, :32].contiguous().view(torch.float16).float()  # [tiles, supers, 16]
    dmin = scales[:, :, 32:64].contiguous().view(torch.float16).float()
    sc = scales[:, :, 64:192].reshape(count, supers, 8, TILE).float()
    m = scales[:, :, 192:].reshape(count, supers, 8, TILE).float()
    step = sc * d[:, :, None]
    zero = 8.0 * step - m * dmin[:, :, None]

    def rows(values: torch.Tensor) -> torch.Tensor:  # [tiles, supers, 8, 16] -> [out, groups]
        return values.reshape(count, supers * 8, TILE).transpose(1, 2).reshape(count * TILE, -1)[:out_features]

    return _tile_codes(tiles, out_features), rows(step).contiguous(), rows(zero).contiguous()


def unpack_int4(tiles: torch.Tensor, scales: torch.Tensor, out_features: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_int4`: ``(codes uint8 [out, in], step float32 [out, groups], zero float32 [out,
    groups])``."""
    count, chunks, _ = tiles.shape
    s = scales.float().view(count, chunks * 8 // GROUP, 2, TILE).permute(0, 3, 1, 2).reshape(count * TILE, -1, 2)
    return _tile_codes(tiles, out_features), s[:out_features, :, 0].contiguous(), s[:out_features, :, 1].contiguous()


def _tile_codes(tiles: torch.Tensor, out_features: int) -> torch.Tensor:
    """Inverse of :func:`_nibble_tiles`: the codes uint8 ``[out, in]``."""
    count, chunks, _ = tiles.shape
    t = tiles.view(count, chunks, TILE, 4)
    c = torch.stack([t & 0x0F, t >> 4], dim=-1)  # [tile, chunk, lane, i, nibble]
    return c.permute(0, 2, 1, 4, 3).reshape(count * TILE, chunks * 8)[:out_features].contiguous()


def pack_int5(codes: torch.Tensor, step: torch.Tensor, zero: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``codes`` uint8 ``[out, in]`` in [0, 31] (``w = (q - 16) * step + zero``), ``step`` and ``zero`` ``[out, in /
    32]`` -> ``(tiles uint8 [tiles, in / 32 * 5, 64], scales bfloat16 [tiles, in / 32, 2, 16])``.

    Per group of 32 inputs, five chunks of 64 bytes: the codes' low four bits as :func:`pack_int4` stores codes (four
    chunks), then their fifth bits as eight 64-bit masks, little-endian: mask ``2c + h`` has bit ``4 l + i`` set when
    the code that byte ``4 l + i`` of chunk ``c`` holds in its low (``h = 0``) or high (``h = 1``) nibble is 16 or
    more, so one masked add of 16 completes a vector of the nibbles the int4 kernel unpacks."""
    out_features, in_features = codes.shape
    if in_features % GROUP:
        raise ValueError(f"int5 needs in_features divisible by {GROUP}, got {in_features}")
    codes = codes.to(torch.uint8)
    low_tiles, scales = pack_int4(codes & 0x0F, step, zero)
    count, groups = tiles_count(out_features), in_features // GROUP
    tiles = torch.cat([low_tiles.view(count, groups, 4, 64), _bit_plane((codes >> 4) & 1)], dim=2)
    return tiles.reshape(count, groups * 5, 64).contiguous(), scales


def _bit_plane(bits: torch.Tensor) -> torch.Tensor:
    """One bit of each code (``bits`` ``[out, in]`` of 0 and 1) as a group's eight 64-bit masks, little-endian:
    ``[tiles, in / 32, 1, 64]``; mask ``2c + h`` has bit ``4 l + i`` set when the code that byte ``4 l + i`` of chunk
    ``c`` holds in its low (``h = 0``) or high (``h = 1``) nibble has the bit."""
    out_features, in_features = bits.shape
    count, pad, groups = tiles_count(out_features), -out_features % TILE, in_features // GROUP
    lanes = F.pad(bits.to(torch.uint8), (0, 0, 0, pad)).view(count, TILE, groups, 4, 2, 4)  # [tile, lane, group, chunk, h, i]
    ordered = lanes.permute(0, 2, 3, 4, 1, 5).reshape(count, groups, 8, 8, 8)  # [tile, group, mask, byte, bit]
    weights = (1 << torch.arange(8, dtype=torch.int32)).view(1, 1, 1, 1, 8)
    return (ordered.to(torch.int32) * weights).sum(dim=-1).to(torch.uint8).reshape(count, groups, 1, 64)


def _plane_bits(planes: torch.Tensor, out_features: int) -> torch.Tensor:
    """Inverse of :func:`_bit_plane`: ``[tiles, groups, 64]`` masks -> ``[out, in]`` bits (uint8)."""
    count, groups, _ = planes.shape
    bits = (planes.reshape(count, groups, 8, 8, 1).to(torch.int32) >> torch.arange(8, dtype=torch.int32)) & 1
    return bits.view(count, groups, 4, 2, TILE, 4).permute(0, 4, 1, 2, 3, 5).reshape(count * TILE, groups * GROUP)[:out_features].to(torch.uint8)


def unpack_int5(tiles: torch.Tensor, scales: torch.Tensor, out_features: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_int5`: ``(codes uint8 [out, in], step float32 [out, groups], zero float32 [out,
    groups])``."""
    count, chunks, _ = tiles.shape
    groups = chunks // 5
    t = tiles.view(count, groups, 5, 64)
    low, step, zero = unpack_int4(t[:, :, :4].reshape(count, groups * 4, 64).contiguous(), scales, out_features)
    return (low | (_plane_bits(t[:, :, 4], out_features) << 4)).contiguous(), step, zero


def pack_int6k(codes: torch.Tensor, sc: torch.Tensor, d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A GGUF's Q6_K tensor as it is stored (``w = d * sc * (q - 32)``): ``codes`` uint8 ``[out, in]`` in [0, 63],
    ``sc`` int8 ``[out, in / 16]``, ``d`` float16 ``[out, in / 256]`` -> ``(tiles uint8 [tiles, in / 32 * 6, 64],
    scales uint8 [tiles, in / 256, 288])``.

    Per group of 32 inputs, six chunks of 64 bytes: the codes' low four bits as :func:`pack_int4` stores codes, then
    their bit 4 and their bit 5 as :func:`pack_int5` stores its fifth bits. Per tile and superblock of 256 inputs,
    288 bytes of scales: the 16 outputs' ``d`` (float16), then for each of its 16 sub-blocks of 16 inputs the 16
    outputs' ``sc``. 6.5625 bits a weight, Q6_K's own, where int8 takes 8."""
    out_features, in_features = codes.shape
    if in_features % SUPER:
        raise ValueError(f"int6 needs in_features divisible by {SUPER}, got {in_features}")
    if int(codes.max()) > 63:
        raise ValueError("int6 codes are 6-bit integers (at most 63)")
    codes = codes.to(torch.uint8)
    count, groups, supers = tiles_count(out_features), in_features // GROUP, in_features // SUPER
    low = _nibble_tiles(codes & 0x0F).view(count, groups, 4, 64)
    tiles = torch.cat([low, _bit_plane((codes >> 4) & 1), _bit_plane((codes >> 5) & 1)], dim=2)
    halves = _lanes(d.to(torch.float16), count).contiguous().view(torch.uint8)  # [tiles, supers, 32]
    steps = _lanes(sc.to(torch.int8).view(torch.uint8), count).reshape(count, supers, 16 * TILE)
    return tiles.reshape(count, groups * 6, 64).contiguous(), torch.cat([halves, steps], dim=2).contiguous()


def unpack_int6k(tiles: torch.Tensor, scales: torch.Tensor, out_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_int6k`'s codes, and the float32 step per 16 inputs the kernel computes (``sc * d``):
    ``(codes uint8 [out, in], step [out, in / 16])``."""
    count, chunks, _ = tiles.shape
    groups, supers = chunks // 6, scales.shape[1]
    t = tiles.view(count, groups, 6, 64)
    low = _tile_codes(t[:, :, :4].reshape(count, groups * 4, 64), out_features)
    codes = low | (_plane_bits(t[:, :, 4], out_features) << 4) | (_plane_bits(t[:, :, 5], out_features) << 5)
    d = scales[:, :, :32].contiguous().view(torch.float16).float()  # [tiles, supers, 16]
    sc = scales[:, :, 32:].contiguous().view(torch.int8).reshape(count, supers, 16, TILE).float()
    step = (sc * d[:, :, None]).reshape(count, supers * 16, TILE).transpose(1, 2).reshape(count * TILE, -1)
    return codes.contiguous(), step[:out_features].contiguous()


def pack_int8(qweight: torch.Tensor) -> torch.Tensor:
    """``qweight`` int8 ``[out, in]`` in [-127, 127] -> uint8 ``[tiles, padded_inputs(in) / 4, 64]`` (``q + 128``)."""
    out_features, in_features = qweight.shape
    count, width = tiles_count(out_features), padded_inputs(in_features)
    u = (qweight.to(torch.int16) + 128).to(torch.uint8)
    u = F.pad(u, (0, width - in_features, 0, count * TILE - out_features), value=128)
    return u.view(count, TILE, width // 4, 4).transpose(1, 2).reshape(count, width // 4, 64).contiguous()


def unpack_int8(tiles: torch.Tensor, out_features: int, in_features: int) -> torch.Tensor:
    """Inverse of :func:`pack_int8`: int8 ``[out, in]``."""
    count, chunks, _ = tiles.shape
    u = tiles.view(count, chunks, TILE, 4).transpose(1, 2).reshape(count * TILE, chunks * 4)
    return (u[:out_features, :in_features].to(torch.int16) - 128).to(torch.int8).contiguous()


__all__ = ["GROUP", "TILE", "pack_int4", "pack_int5", "pack_int8", "padded_inputs", "tiles_count", "unpack_int4", "unpack_int5",
           "unpack_int8"]
