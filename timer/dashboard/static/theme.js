// The visitor's choice (kept in this browser), else the system's: a classic script in the
// head, run before the first paint, so a dark page never flashes light.
document.documentElement.dataset.theme = localStorage.getItem("tickwheel-theme")
  || (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light");
