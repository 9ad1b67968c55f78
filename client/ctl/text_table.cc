#include "client/ctl/text_table.h"

#include <algorithm>

namespace kvoffload::client::ctl {
namespace {

size_t DisplayWidth(const std::string& s) {
  size_t width = 0;
  for (char c : s) width += (static_cast<unsigned char>(c) & 0xC0) != 0x80;  // code points
  return width;
}

}  // namespace

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render(bool with_header) const {
  std::vector<size_t> widths(columns_.size());
  for (size_t c = 0; c < columns_.size(); ++c) {
    widths[c] = DisplayWidth(columns_[c].header);
    for (const auto& row : rows_) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(widths[c] - DisplayWidth(cells[c]), ' ');
      if (c > 0) text += "  ";
      if (columns_[c].align == Align::kRight) {
        text += pad + cells[c];
      } else {
        text += cells[c] + pad;
      }
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + "\n";
  };
  std::vector<std::string> headers;
  for (const Column& column : columns_) headers.push_back(column.header);
  if (with_header) line(headers);
  for (const auto& row : rows_) line(row);
  return out;
}

}  // namespace kvoffload::client::ctl
