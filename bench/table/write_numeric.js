// Writes bench/tables' numeric table with an independent writer (apache-arrow builds it,
// parquet-wasm, the Rust Parquet writer, writes the Parquet; apache-arrow the Arrow IPC file):
// ROWS rows of 10 float32 columns f0..f9 and 10 int64 columns i0..i9. Row r of column c holds
// what bench/tables.cpp computes (value_f, value_i): the two must change together.
// Usage: node write_numeric.js OUT_DIR ROWS ROWS_PER_GROUP
// (the npm packages are tests/table's: run with NODE_PATH=tests/table/node_modules)
"use strict";
const fs = require("fs");
const path = require("path");
const arrow = require("apache-arrow");
const pq = require("parquet-wasm");

const [out, rowsArg, groupArg] = process.argv.slice(2);
if (!out || !rowsArg || !groupArg) {
  console.error("usage: node write_numeric.js OUT_DIR ROWS ROWS_PER_GROUP");
  process.exit(2);
}
const rows = Number(rowsArg);
fs.mkdirSync(out, { recursive: true });

const columns = {};
for (let c = 0; c < 10; ++c) {
  const f = new Float32Array(rows);
  for (let r = 0; r < rows; ++r) f[r] = ((r * (c + 3)) % 1000) * 0.25 - c;
  columns[`f${c}`] = arrow.makeVector(f);
}
for (let c = 0; c < 10; ++c) {
  const v = new BigInt64Array(rows);
  for (let r = 0; r < rows; ++r) v[r] = BigInt(r) * BigInt(c + 1) - 7n * BigInt(c);
  columns[`i${c}`] = arrow.makeVector(v);
}
const table = new arrow.Table(columns);
const props = new pq.WriterPropertiesBuilder()
  .setCompression(pq.Compression.SNAPPY)
  .setMaxRowGroupSize(Number(groupArg))
  .build();
const wasmTable = pq.Table.fromIPCStream(arrow.tableToIPC(table, "stream"));
fs.writeFileSync(path.join(out, "numeric.parquet"), pq.writeParquet(wasmTable, props));
// Arrow IPC file format, record batches of ROWS_PER_GROUP rows, uncompressed.
const batches = [];
for (let first = 0; first < rows; first += Number(groupArg)) {
  batches.push(...table.slice(first, Math.min(rows, first + Number(groupArg))).batches);
}
fs.writeFileSync(path.join(out, "numeric.arrow"), arrow.tableToIPC(new arrow.Table(batches), "file"));
console.log(`${out}: ${rows} rows x 20 columns, groups of ${groupArg}`);
