// Writes the Parquet files tests/parquet_dataset_test.cpp reads, with an independent writer:
// apache-arrow builds the tables, parquet-wasm (the Rust Parquet writer) writes them.
// Usage: node write_tables.js OUT_DIR. Row r of every file holds the values the test computes
// from r (see expected_* in the test), so the two must change together.
"use strict";
const fs = require("fs");
const path = require("path");
const arrow = require("apache-arrow");
const pq = require("parquet-wasm");

const out = process.argv[2];
if (!out) {
  console.error("usage: node write_tables.js OUT_DIR");
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });

const N = 50;
const rows = [...Array(N).keys()];
const cat = (r) => ["pear", "apple", "fig", "banana", "kiwi"][(r * 3) % 5];
const bytes = (r) => Uint8Array.from([...Array(r % 6).keys()].map((k) => (r * 31 + k * 7) % 256));

function vec(type, values) {
  return arrow.vectorFromArray(values, type);
}

function table(first, count) {
  const rs = rows.slice(first, first + count);
  return new arrow.Table({
    b: vec(new arrow.Bool(), rs.map((r) => r % 3 === 0)),
    i8: vec(new arrow.Int8(), rs.map((r) => ((r * 37) % 256) - 128)),
    i16: vec(new arrow.Int16(), rs.map((r) => r * 1000 - 20000)),
    i32: vec(new arrow.Int32(), rs.map((r) => r * 100000 - 2000000000)),
    i64: vec(new arrow.Int64(), rs.map((r) => BigInt(r) * 123456789012n - 3000000000000n)),
    u8: vec(new arrow.Uint8(), rs.map((r) => (r * 11) % 256)),
    u16: vec(new arrow.Uint16(), rs.map((r) => 65535 - r * 7)),
    u32: vec(new arrow.Uint32(), rs.map((r) => 4294967295 - r * 1000)),
    u64: vec(new arrow.Uint64(), rs.map((r) => 18446744073709551615n - BigInt(r) * 3n)),
    f32: vec(new arrow.Float32(), rs.map((r) => r * 0.5 - 3)),
    f64: vec(new arrow.Float64(), rs.map((r) => r * 0.25 + 1e10)),
    s: vec(new arrow.Utf8(), rs.map(cat)),
    bin: vec(new arrow.Binary(), rs.map(bytes)),
    nf: vec(new arrow.Float64(), rs.map((r) => (r % 4 === 1 ? null : r * 1.5))),
    ns: vec(new arrow.Utf8(), rs.map((r) => (r % 7 === 2 ? null : cat(r)))),
    ts: vec(new arrow.TimestampMillisecond(), rs.map((r) => r * 1000)),
  });
}

function write(name, t, props) {
  const wasmTable = pq.Table.fromIPCStream(arrow.tableToIPC(t, "stream"));
  const bytes = pq.writeParquet(wasmTable, props);
  fs.writeFileSync(path.join(out, name), bytes);
}

const codecs = { none: pq.Compression.UNCOMPRESSED, snappy: pq.Compression.SNAPPY,
                 gzip: pq.Compression.GZIP, zstd: pq.Compression.ZSTD };
for (const [codec, c] of Object.entries(codecs)) {
  for (const dict of [true, false]) {
    for (const version of [1, 2]) {
      // Without a dictionary, PLAIN values asked for (v2's default would be the DELTA encodings).
      let builder = new pq.WriterPropertiesBuilder();
      if (!dict) builder = builder.setEncoding(pq.Encoding.PLAIN);
      const props = builder
        .setCompression(c)
        .setDictionaryEnabled(dict)
        .setWriterVersion(version === 1 ? pq.WriterVersion.V1 : pq.WriterVersion.V2)
        .setMaxRowGroupSize(16)
        .setDataPageSizeLimit(64)
        .setWriteBatchSize(8)
        .build();
      write(`all_${codec}_${dict ? "dict" : "plain"}_v${version}.parquet`, table(0, N), props);
    }
  }
}
// The same rows in three files (20 + 25 + 5), one row group each.
for (const [name, first, count] of [["part0", 0, 20], ["part1", 20, 25], ["part2", 45, 5]]) {
  write(`${name}.parquet`, table(first, count), new pq.WriterPropertiesBuilder().build());
}
console.log("wrote", fs.readdirSync(out).length, "files to", out);
