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
  convention); int8 scales: one float32 per output.

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


def tiles_count(out_features: int) -> int:
    return -(-out_features // TILE)


def padded_inputs(in_features: int) -> int:
    """``in_features`` rounded up to a multiple of :data:`GROUP` (the int8 layout's padded width)."""
    return -(-in_features // GROUP) * GROUP


def pack_int4(codes: torch.Tensor, step: torch.Tensor, zero: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``codes`` uint8 ``[out, in]`` in [0, 15], ``step`` and ``zero`` ``[out, in / 32]`` -> ``(tiles uint8
    [tiles, in / 8, 64], scales bfloat16 [tiles, in / 32, 2, 16])``."""
    out_features, in_features = codes.shape
    if in_features % GROUP:
        raise ValueError(f"int4 needs in_features divisible by {GROUP}, got {in_features}")
    count, pad = tiles_count(out_features), -out_features % TILE
    c = F.pad(codes.to(torch.uint8), (0, 0, 0, pad)).view(count, TILE, in_features // 8, 2, 4)
    c = c.permute(0, 2, 1, 4, 3)  # [tile, chunk, lane, i, nibble]
    tiles = (c[..., 0] | (c[..., 1] << 4)).reshape(count, in_features // 8, 64).contiguous()
    groups = in_features // GROUP

    def lanes(values: torch.Tensor) -> torch.Tensor:
        return F.pad(values.float(), (0, 0, 0, pad)).view(count, TILE, groups).transpose(1, 2)

    scales = torch.stack([lanes(step), lanes(zero)], dim=2).to(torch.bfloat16).contiguous()
    return tiles, scales


def unpack_int4(tiles: torch.Tensor, scales: torch.Tensor, out_features: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_int4`: ``(codes uint8 [out, in], step float32 [out, groups], zero float32 [out,
    groups])``."""
    count, chunks, _ = tiles.shape
    in_features = chunks * 8
    t = tiles.view(count, chunks, TILE, 4)
    c = torch.stack([t & 0x0F, t >> 4], dim=-1)  # [tile, chunk, lane, i, nibble]
    codes = c.permute(0, 2, 1, 4, 3).reshape(count * TILE, in_features)[:out_features].contiguous()
    s = scales.float().view(count, in_features // GROUP, 2, TILE).permute(0, 3, 1, 2).reshape(count * TILE, -1, 2)
    return codes, s[:out_features, :, 0].contiguous(), s[:out_features, :, 1].contiguous()


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
    count, pad, groups = tiles_count(out_features), -out_features % TILE, in_features // GROUP
    high = F.pad(codes >> 4, (0, 0, 0, pad)).view(count, TILE, groups, 4, 2, 4)  # [tile, lane, group, chunk, h, i]
    bits = high.permute(0, 2, 3, 4, 1, 5).reshape(count, groups, 8, 8, 8)  # [tile, group, mask, byte, bit]
    weights = (1 << torch.arange(8, dtype=torch.int32)).view(1, 1, 1, 1, 8)
    masks = (bits.to(torch.int32) * weights).sum(dim=-1).to(torch.uint8).reshape(count, groups, 1, 64)
    tiles = torch.cat([low_tiles.view(count, groups, 4, 64), masks], dim=2).reshape(count, groups * 5, 64)
    return tiles.contiguous(), scales


def unpack_int5(tiles: torch.Tensor, scales: torch.Tensor, out_features: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`pack_int5`: ``(codes uint8 [out, in], step float32 [out, groups], zero float32 [out,
    groups])``."""
    count, chunks, _ = tiles.shape
    groups = chunks // 5
    t = tiles.view(count, groups, 5, 64)
    low, step, zero = unpack_int4(t[:, :, :4].reshape(count, groups * 4, 64).contiguous(), scales, out_features)
    bits = (t[:, :, 4].reshape(count, groups, 8, 8, 1).to(torch.int32) >> torch.arange(8, dtype=torch.int32)) & 1
    high = bits.view(count, groups, 4, 2, TILE, 4).permute(0, 4, 1, 2, 3, 5).reshape(count * TILE, groups * GROUP)
    return (low | (high[:out_features].to(torch.uint8) << 4)).contiguous(), step, zero


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
