// assets.h — the page's files, compiled into the binary.
//
// src/dashboard/assets/{index.html,charts.js,app.js,style.css} are real files in the
// source tree; embed_assets.cmake turns them into byte arrays at build time, so
// `lockstep dashboard` and `lockstep report` need nothing but the binary.
#pragma once

#include <string_view>
#include <vector>

namespace lockstep::dashboard {

struct Asset {
  std::string_view name;         ///< "index.html", "charts.js", "app.js", "style.css"
  std::string_view contentType;  ///< e.g. "text/html; charset=utf-8"
  std::string_view body;
};

/// Every embedded asset (generated code).
const std::vector<Asset>& assets();
/// The asset called `name`, or nullptr.
const Asset* findAsset(std::string_view name);

}  // namespace lockstep::dashboard
