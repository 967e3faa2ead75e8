#!/usr/bin/env bash
# hip_build.sh — CTest wrapper: the GPU kernels compile as HIP for gfx90a and gfx1030
# (scripts/hip-check.sh). Skips (77) where hipcc is not installed.
#   usage: bash hip_build.sh <rocmforge-binary> <source-dir>
SRC=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
exec bash "$SRC/scripts/hip-check.sh"
