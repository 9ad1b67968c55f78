// Plain-text tables for kvoffloadctl's human output: columns sized to their widest cell (in
// UTF-8 code points, so "µs" is two wide), two spaces apart, text left-aligned and numbers
// right-aligned, no trailing spaces.
//
//   TextTable table({{"engine", Align::kLeft}, {"rows", Align::kRight}});
//   table.AddRow({"llama/0", "4096"});
//   out << table.Render();
//   // engine   rows
//   // llama/0  4096
//
// Not thread-safe.
#ifndef KVOFFLOAD_CLIENT_CTL_TEXT_TABLE_H_
#define KVOFFLOAD_CLIENT_CTL_TEXT_TABLE_H_

#include <string>
#include <vector>

namespace kvoffload::client::ctl {

enum class Align { kLeft, kRight };

struct Column {
  std::string header;
  Align align = Align::kRight;
};

class TextTable {
 public:
  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}

  // `cells` has one entry per column (missing cells are empty, extra ones are dropped).
  void AddRow(std::vector<std::string> cells);
  // Header line (unless `with_header` is false), then one line per row; each line ends with
  // '\n'. Widths count the header either way.
  std::string Render(bool with_header = true) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_TEXT_TABLE_H_
