//! The x86 kernels of the int8 path: the dot-product forms per instruction set ([`mac`]), the 32-value weight
//! formats ([`formats`]), packing ([`pack`]), the 32-value block kernel and its dispatch ([`blocks32`]), and the
//! row driver and per-ISA entry points the k-quant kernels use too ([`rows`]).

mod blocks32;
mod formats;
pub(crate) mod mac;
mod pack;
mod rows;

pub(crate) use blocks32::run;
pub(crate) use pack::{act_rows, f16x8, store_lanes, transpose8};
pub(crate) use rows::{rows_avx2, rows_vnni, rows_vnni512, rows_zmm, Mat, RowKernel, TileKernel, Tiled};
