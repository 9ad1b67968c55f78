// A tiny JSON writer for kvoffloadctl's machine-readable output (no JSON library is available).
// Keys are written in the order they are added; strings are escaped per RFC 8259 and invalid
// UTF-8 is replaced by U+FFFD, so the output is always valid JSON.
//
//   JsonObjectWriter engine;
//   engine.String("engine_id", "llama");
//   engine.Uint("dp_rank", 0);
//   JsonObjectWriter root;
//   root.Raw("engines", JsonArray({std::move(engine).Close()}));
//   std::string line = std::move(root).Close();  // {"engines":[{"engine_id":"llama",...}]}
//
// Not thread-safe; a writer is used by one thread and closed once.
#ifndef KVOFFLOAD_CLIENT_CTL_JSON_WRITER_H_
#define KVOFFLOAD_CLIENT_CTL_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvoffload::client::ctl {

// `text` as a JSON string literal, quotes included: '"' '\\' and control characters escaped
// (\n \t \r \b \f, others as \u00XX), invalid UTF-8 bytes replaced by \ufffd.
std::string JsonQuote(absl::string_view text);

// A JSON number that reads back as the same double (shortest of %.15g / %.17g); NaN and the
// infinities, which JSON cannot express, are written as null.
std::string JsonDouble(double value);

// "[e0,e1,...]" from elements that are already JSON.
std::string JsonArray(const std::vector<std::string>& elements);

class JsonObjectWriter {
 public:
  JsonObjectWriter() = default;
  JsonObjectWriter(const JsonObjectWriter&) = delete;
  JsonObjectWriter& operator=(const JsonObjectWriter&) = delete;

  void String(absl::string_view key, absl::string_view value);
  void Uint(absl::string_view key, uint64_t value);
  void Int(absl::string_view key, int64_t value);
  void Double(absl::string_view key, double value);
  void Bool(absl::string_view key, bool value);
  // `json` is an object, array or other value already written as JSON.
  void Raw(absl::string_view key, absl::string_view json);

  // The object, "{...}".
  std::string Close() &&;

 private:
  void Key(absl::string_view key);
  std::string json_ = "{";
};

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_JSON_WRITER_H_
