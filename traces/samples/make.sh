#!/usr/bin/env bash
# Regenerate the bundled sample traces (deterministic: same pic version -> same bytes).
# Run from the repository root:  bash traces/samples/make.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=traces/samples
pic synth --scenario early-variation --requests 200 --seed 0 -o "$out/early-variation.parquet"
pic synth --scenario early-variation --requests 200 --seed 0 --markers -o "$out/early-variation-markers.parquet"
