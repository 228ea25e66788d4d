// Writes an image folder (ROOT/<class>/<file>, ImageFolder's layout) as a Hugging Face-style
// image table in Parquet with an independent writer (apache-arrow builds it, parquet-wasm writes
// it, uncompressed: JPEG bytes do not compress): `image` struct{bytes: binary, path: string} and
// `label` int64 (the class's index among the sorted class folders), rows in ImageFolder's order
// (classes sorted, files sorted within each), row groups of ROWS_PER_GROUP rows.
// Usage: node write_images.js ROOT OUT.parquet ROWS_PER_GROUP
// (the npm packages are tests/table's: run with NODE_PATH=tests/table/node_modules)
"use strict";
const fs = require("fs");
const path = require("path");
const arrow = require("apache-arrow");
const pq = require("parquet-wasm");

const [root, out, groupArg] = process.argv.slice(2);
if (!root || !out || !groupArg) {
  console.error("usage: node write_images.js ROOT OUT.parquet ROWS_PER_GROUP");
  process.exit(2);
}
const classes = fs
  .readdirSync(root)
  .filter((d) => fs.statSync(path.join(root, d)).isDirectory())
  .sort();
const bytes = [];
const paths = [];
const labels = [];
classes.forEach((c, label) => {
  for (const f of fs.readdirSync(path.join(root, c)).sort()) {
    bytes.push(new Uint8Array(fs.readFileSync(path.join(root, c, f))));
    paths.push(`${c}/${f}`);
    labels.push(BigInt(label));
  }
});
const imageType = new arrow.Struct([
  new arrow.Field("bytes", new arrow.Binary(), true),
  new arrow.Field("path", new arrow.Utf8(), true),
]);
const image = arrow.vectorFromArray(
  bytes.map((b, i) => ({ bytes: b, path: paths[i] })),
  imageType,
);
const table = new arrow.Table({
  image,
  label: arrow.vectorFromArray(labels, new arrow.Int64()),
});
const props = new pq.WriterPropertiesBuilder()
  .setCompression(pq.Compression.UNCOMPRESSED)
  .setMaxRowGroupSize(Number(groupArg))
  .build();
const wasmTable = pq.Table.fromIPCStream(arrow.tableToIPC(table, "stream"));
fs.writeFileSync(out, pq.writeParquet(wasmTable, props));
console.log(`${out}: ${bytes.length} images of ${classes.length} classes`);
