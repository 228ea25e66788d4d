// Writes the Parquet files tests/parquet_dataset_test.cpp reads, with an independent writer:
// apache-arrow builds the tables, parquet-wasm (the Rust Parquet writer) writes them.
// Usage: node write_tables.js OUT_DIR [IMAGES_DIR]. Row r of every file holds the values the test computes
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

const written = new Map();
function write(name, t, props) {
  const wasmTable = pq.Table.fromIPCStream(arrow.tableToIPC(t, "stream"));
  const bytes = pq.writeParquet(wasmTable, props);
  fs.writeFileSync(path.join(out, name), bytes);
  written.set(name, bytes);
}

// The files hold what their names say: each column chunk of `column` in every row group is
// compressed with `codec` and has `encoding` among its encodings (and not `absent`) (read back by the same
// library's metadata reader), so that a test of an encoding cannot pass on another one.
async function expect(name, column, codec, encoding, absent = pq.Encoding.RLE_DICTIONARY) {
  const file = await pq.ParquetFile.fromFile(new Blob([written.get(name)]));
  const meta = file.metadata();
  for (const g of meta.rowGroups()) {
    const chunk = g.columns().find((c) => c.columnPath().join(".") === column);
    const encodings = chunk.encodings();
    if (chunk.compression() !== codec || !encodings.includes(encoding) ||
        (absent !== encoding && encodings.includes(absent))) {
      throw new Error(`${name}: column ${column}: compression ${chunk.compression()}, ` +
                      `encodings ${chunk.encodings()}; expected ${codec} and ${encoding}`);
    }
  }
}

const codecs = { none: pq.Compression.UNCOMPRESSED, snappy: pq.Compression.SNAPPY,
                 gzip: pq.Compression.GZIP, zstd: pq.Compression.ZSTD,
                 lz4raw: pq.Compression.LZ4_RAW, lz4: pq.Compression.LZ4,
                 brotli: pq.Compression.BROTLI };
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
// The writer's own choice for pages v2 without a dictionary: DELTA_BINARY_PACKED integers,
// DELTA_BYTE_ARRAY text and bytes, RLE booleans.
for (const [codec, c] of [["none", pq.Compression.UNCOMPRESSED], ["snappy", pq.Compression.SNAPPY]]) {
  const props = new pq.WriterPropertiesBuilder()
    .setCompression(c)
    .setDictionaryEnabled(false)
    .setWriterVersion(pq.WriterVersion.V2)
    .setMaxRowGroupSize(16)
    .setDataPageSizeLimit(64)
    .setWriteBatchSize(8)
    .build();
  write(`all_${codec}_delta_v2.parquet`, table(0, N), props);
}
// Each column in an encoding named: DELTA_BINARY_PACKED, DELTA_LENGTH_BYTE_ARRAY,
// DELTA_BYTE_ARRAY, BYTE_STREAM_SPLIT; pages v1.
{
  let b = new pq.WriterPropertiesBuilder()
    .setCompression(pq.Compression.ZSTD)
    .setDictionaryEnabled(false)
    .setMaxRowGroupSize(16)
    .setDataPageSizeLimit(64)
    .setWriteBatchSize(8);
  for (const col of ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "ts"]) {
    b = b.setColumnEncoding(col, pq.Encoding.DELTA_BINARY_PACKED);
  }
  b = b.setColumnEncoding("bin", pq.Encoding.DELTA_LENGTH_BYTE_ARRAY);
  b = b.setColumnEncoding("s", pq.Encoding.DELTA_BYTE_ARRAY);
  b = b.setColumnEncoding("ns", pq.Encoding.DELTA_BYTE_ARRAY);
  for (const col of ["f32", "f64", "nf"]) b = b.setColumnEncoding(col, pq.Encoding.BYTE_STREAM_SPLIT);
  write("all_zstd_encodings_v1.parquet", table(0, N), b.build());
}
// The same rows in three files (20 + 25 + 5), one row group each.
for (const [name, first, count] of [["part0", 0, 20], ["part1", 20, 25], ["part2", 45, 5]]) {
  write(`${name}.parquet`, table(first, count), new pq.WriterPropertiesBuilder().build());
}
// A wide table for reads by ranges: 48 float64 columns c00..c47, an int64 "label" and a utf8
// "text" (50 columns), 2000 rows in row groups of 500, uncompressed PLAIN values; wide.txt lists
// each column's chunk sizes (compressed bytes, per row group) as this library's metadata says.
const WIDE = 2000;
const wideText = (r) => `row ${r} ` + "x".repeat(r % 13);
{
  const wr = [...Array(WIDE).keys()];
  const cols = {};
  for (let k = 0; k < 48; ++k) {
    cols[`c${String(k).padStart(2, "0")}`] = vec(new arrow.Float64(), wr.map((r) => r * 50 + k + 0.5));
  }
  cols.label = vec(new arrow.Int64(), wr.map((r) => BigInt(r % 10)));
  cols.text = vec(new arrow.Utf8(), wr.map(wideText));
  const props = new pq.WriterPropertiesBuilder()
    .setCompression(pq.Compression.UNCOMPRESSED)
    .setDictionaryEnabled(false)
    .setEncoding(pq.Encoding.PLAIN)
    .setMaxRowGroupSize(500)
    .build();
  write("wide.parquet", new arrow.Table(cols), props);
}
// HF-style image tables, when IMAGES_DIR is given (its files, sorted: row i holds the i-th):
// images.parquet has `image` struct{bytes, path} (path null for every third row), the same
// bytes as plain binary `raw`, and `label` i; row groups of 7 rows. images_null.parquet is
// 3 rows whose row 1 has a null `bytes` beside its path.
const imagesDir = process.argv[3];
if (imagesDir) {
  const files = fs.readdirSync(imagesDir).sort();
  const data = files.map((f) => new Uint8Array(fs.readFileSync(path.join(imagesDir, f))));
  const fld = (name, type) => new arrow.Field(name, type, true);
  const image = new arrow.Struct([fld("bytes", new arrow.Binary()), fld("path", new arrow.Utf8())]);
  const t = new arrow.Table({
    image: vec(image, files.map((f, i) => ({ bytes: data[i], path: i % 3 === 0 ? null : f }))),
    raw: vec(new arrow.Binary(), data),
    label: vec(new arrow.Int64(), files.map((f, i) => BigInt(i))),
  });
  write("images.parquet", t, new pq.WriterPropertiesBuilder().setMaxRowGroupSize(7).build());
  // The same with Hugging Face's features in the file's key-value metadata, as `datasets` writes
  // them (through pyarrow): `image` an Image, `raw` a Value("binary").
  const features = { image: { _type: "Image" }, raw: { dtype: "binary", _type: "Value" },
                     label: { dtype: "int64", _type: "Value" } };
  const hf = new Map([["huggingface", JSON.stringify({ info: { features } })]]);
  write("images_hf.parquet", t,
        new pq.WriterPropertiesBuilder().setMaxRowGroupSize(7).setKeyValueMetadata(hf).build());
  const n = new arrow.Table({
    image: vec(image, [0, 1, 2].map((i) => ({ bytes: i === 1 ? null : data[i], path: files[i] }))),
  });
  write("images_null.parquet", n);
}
// FLOAT16 (FIXED_LEN_BYTE_ARRAY(2) with the FLOAT16 logical type, as arrow-rs writes Arrow's
// float16): `h` r / 4 - 4 (null every fifth row), `hv` fixed_size_list<float16>[3] of r, -r and
// r / 8, `hl` list<float16> of r % 4 values r + k / 2; PLAIN, BYTE_STREAM_SPLIT and
// DELTA_BYTE_ARRAY (the writer makes no dictionary for them), pages v1 (snappy) and v2 (zstd).
{
  const fld = (name, type) => new arrow.Field(name, type, true);
  const half = new arrow.Float16();
  const t = new arrow.Table({
    h: vec(half, rows.map((r) => (r % 5 === 3 ? null : r / 4 - 4))),
    hv: vec(new arrow.FixedSizeList(3, fld("item", half)), rows.map((r) => [r, -r, r / 8])),
    hl: vec(new arrow.List(fld("item", half)),
            rows.map((r) => [...Array(r % 4).keys()].map((k) => r + k / 2))),
  });
  const encodings = { plain: pq.Encoding.PLAIN, split: pq.Encoding.BYTE_STREAM_SPLIT,
                      delta: pq.Encoding.DELTA_BYTE_ARRAY };
  for (const [name, e] of Object.entries(encodings)) {
    for (const version of [1, 2]) {
      const props = new pq.WriterPropertiesBuilder()
        .setCompression(version === 1 ? pq.Compression.SNAPPY : pq.Compression.ZSTD)
        .setDictionaryEnabled(false)
        .setWriterVersion(version === 1 ? pq.WriterVersion.V1 : pq.WriterVersion.V2)
        .setMaxRowGroupSize(16)
        .setDataPageSizeLimit(64)
        .setWriteBatchSize(8)
        .setEncoding(e)
        .build();
      write(`float16_${name}_v${version}.parquet`, t, props);
    }
  }
}
// Files whose schemas differ: schema_ab.parquet has schema_a.parquet's column and one more.
{
  const x = vec(new arrow.Int32(), rows);
  write("schema_a.parquet", new arrow.Table({ x }));
  write("schema_ab.parquet", new arrow.Table({ x, y: vec(new arrow.Float64(), rows.map((r) => r / 2)) }));
}
// A footer longer than the 64 KiB a remote file's first read takes: a row group per row.
write("long_footer.parquet", table(0, N), new pq.WriterPropertiesBuilder().setMaxRowGroupSize(1).build());
(async () => {
  const E = pq.Encoding;
  for (const [codec, c] of Object.entries(codecs)) {
    for (const v of [1, 2]) {
      const dict = `all_${codec}_dict_v${v}.parquet`;
      const plain = `all_${codec}_plain_v${v}.parquet`;
      await expect(dict, "i32", c, E.RLE_DICTIONARY);
      await expect(dict, "s", c, E.RLE_DICTIONARY);
      await expect(plain, "i32", c, E.PLAIN);
      await expect(plain, "s", c, E.PLAIN);
    }
  }
  await expect("all_none_delta_v2.parquet", "i64", pq.Compression.UNCOMPRESSED, E.DELTA_BINARY_PACKED);
  await expect("all_none_delta_v2.parquet", "s", pq.Compression.UNCOMPRESSED, E.DELTA_BYTE_ARRAY);
  await expect("all_none_delta_v2.parquet", "b", pq.Compression.UNCOMPRESSED, E.RLE);
  for (const v of [1, 2]) {
    const c = v === 1 ? pq.Compression.SNAPPY : pq.Compression.ZSTD;
    await expect(`float16_plain_v${v}.parquet`, "h", c, E.PLAIN);
    await expect(`float16_split_v${v}.parquet`, "h", c, E.BYTE_STREAM_SPLIT);
    await expect(`float16_split_v${v}.parquet`, "hv.list.item", c, E.BYTE_STREAM_SPLIT);
    await expect(`float16_delta_v${v}.parquet`, "h", c, E.DELTA_BYTE_ARRAY);
    await expect(`float16_delta_v${v}.parquet`, "hl.list.item", c, E.DELTA_BYTE_ARRAY);
  }
  const enc = "all_zstd_encodings_v1.parquet";
  await expect(enc, "i8", pq.Compression.ZSTD, E.DELTA_BINARY_PACKED);
  await expect(enc, "u64", pq.Compression.ZSTD, E.DELTA_BINARY_PACKED);
  await expect(enc, "bin", pq.Compression.ZSTD, E.DELTA_LENGTH_BYTE_ARRAY);
  await expect(enc, "s", pq.Compression.ZSTD, E.DELTA_BYTE_ARRAY);
  await expect(enc, "f32", pq.Compression.ZSTD, E.BYTE_STREAM_SPLIT);
  await expect(enc, "nf", pq.Compression.ZSTD, E.BYTE_STREAM_SPLIT);
  {
    const file = await pq.ParquetFile.fromFile(new Blob([written.get("wide.parquet")]));
    const sizes = new Map();
    for (const g of file.metadata().rowGroups()) {
      for (const c of g.columns()) {
        const name = c.columnPath().join(".");
        if (!sizes.has(name)) sizes.set(name, []);
        sizes.get(name).push(c.compressedSize());
      }
    }
    const lines = [`file ${written.get("wide.parquet").length}`];
    for (const [name, s] of sizes) lines.push(`${name} ${s.join(" ")}`);
    fs.writeFileSync(path.join(out, "wide.txt"), lines.join("\n") + "\n");
  }
  console.log("wrote", written.size, "files to", out);
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
