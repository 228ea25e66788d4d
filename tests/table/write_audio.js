// Writes the audio tables tests/audio_folder_test.cpp reads, with independent writers:
// apache-arrow builds them (and writes the Arrow IPC stream), parquet-wasm writes the Parquet.
// Usage: node write_audio.js OUT_DIR AUDIO_DIR. Row i holds AUDIO_DIR's i-th file (sorted) as
// Hugging Face's Audio does, struct{bytes, path}, the same bytes as plain binary `raw`, and
// `label` i. The *_hf files carry `datasets`' features: `audio` an Audio, `raw` a binary Value.
"use strict";
const fs = require("fs");
const path = require("path");
const A = require("apache-arrow");
const pq = require("parquet-wasm");

const [out, dir] = process.argv.slice(2);
if (!out || !dir) {
  console.error("usage: node write_audio.js OUT_DIR AUDIO_DIR");
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });
const files = fs.readdirSync(dir).sort();
const data = files.map((f) => new Uint8Array(fs.readFileSync(path.join(dir, f))));
const fld = (name, type) => new A.Field(name, type, true);
const audio = new A.Struct([fld("bytes", new A.Binary()), fld("path", new A.Utf8())]);
const t = new A.Table({
  audio: A.vectorFromArray(files.map((f, i) => ({ bytes: data[i], path: f })), audio),
  raw: A.vectorFromArray(data, new A.Binary()),
  label: A.vectorFromArray(files.map((f, i) => BigInt(i)), new A.Int64()),
});
const features = { audio: { sampling_rate: 16000, _type: "Audio" },
                   raw: { dtype: "binary", _type: "Value" },
                   label: { dtype: "int64", _type: "Value" } };
const hf = new Map([["huggingface", JSON.stringify({ info: { features } })]]);
const parquet = (name, props) => {
  const wasm = pq.Table.fromIPCStream(A.tableToIPC(t, "stream"));
  fs.writeFileSync(path.join(out, name), pq.writeParquet(wasm, props.build()));
};
parquet("audio.parquet", new pq.WriterPropertiesBuilder().setMaxRowGroupSize(2));
parquet("audio_hf.parquet",
        new pq.WriterPropertiesBuilder().setMaxRowGroupSize(2).setKeyValueMetadata(hf));
const arrow = (name, table) => {
  const w = new A.RecordBatchStreamWriter();
  w.writeAll(table);
  fs.writeFileSync(path.join(out, name), w.toUint8Array(true));
};
arrow("audio.arrow", t);
arrow("audio_hf.arrow", new A.Table(new A.Schema(t.schema.fields, hf), t.batches));
