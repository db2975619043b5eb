#!/usr/bin/env bash
# Regenerate the bundled sample traces (deterministic: same pic version -> same bytes).
# Run from the repository root:  bash traces/samples/make.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=traces/samples
pic synth --scenario early-variation --requests 200 --seed 0 -o "$out/early-variation.parquet"
pic synth --scenario early-variation --requests 200 --seed 0 --markers -o "$out/early-variation-markers.parquet"
pic synth --scenario rag-reorder --requests 200 --seed 0 -o "$out/rag-reorder.parquet"
pic synth --scenario tool-reorder --requests 200 --seed 0 -o "$out/tool-reorder.parquet"
pic synth --scenario multi-agent --requests 200 --seed 0 -o "$out/multi-agent.parquet"
pic synth --scenario chat --requests 200 --seed 0 -o "$out/chat.parquet"
chmod 644 "$out"/*.parquet
