/* The book's two helps for narrow screens (styled in hoplib.css).
   1. The scroll cue: every box of the article that scrolls sideways (a wide table, a long code line or output)
      is marked hoplib-more-right / hoplib-more-left while it holds more than it shows on that side, and the
      stylesheet fades that edge. The marks follow the reader's scrolling and any change of the box's size
      (a turned phone, a hidden cell opened).
   2. Figures open at full size: each image of a figure or a cell's output becomes a link to the image file,
      marked hoplib-scaled while it is shown smaller than drawn (on a phone), when a line under it says so. */
(() => {
  const mark = (box) => {
    const more = box.scrollWidth - box.clientWidth;
    const overflows = box.clientWidth > 0 && more > 1;
    box.classList.toggle("hoplib-more-left", overflows && box.scrollLeft > 1);
    box.classList.toggle("hoplib-more-right", overflows && box.scrollLeft < more - 1);
  };

  const watched = new WeakSet();
  const resized = new ResizeObserver((entries) => entries.forEach((e) => mark(e.target)));
  const watchScrolling = (article) => {  // again on load: the theme wraps tables in scrolling boxes by script
    for (const box of article.querySelectorAll("*")) {
      if (!watched.has(box) && ["auto", "scroll"].includes(getComputedStyle(box).overflowX)) {
        watched.add(box);
        box.addEventListener("scroll", () => mark(box), { passive: true });
        resized.observe(box);
      }
      if (watched.has(box)) mark(box);
    }
  };

  const scaled = (img) => img.closest("a.hoplib-zoom").classList.toggle(
    "hoplib-scaled", img.naturalWidth > 0 && img.clientWidth < img.naturalWidth - 1);

  const linkFigures = (article) => {
    const resized = new ResizeObserver((entries) => entries.forEach((e) => scaled(e.target)));
    for (const img of article.querySelectorAll("figure img, div.cell_output img")) {
      if (img.closest("a")) continue;
      const link = document.createElement("a");
      link.className = "hoplib-zoom";
      link.href = img.currentSrc || img.src;
      link.title = "Open the figure at full size";
      img.replaceWith(link);
      link.appendChild(img);
      img.addEventListener("load", () => scaled(img));
      resized.observe(img);
      scaled(img);
    }
  };

  const start = () => {
    const article = document.querySelector(".bd-article");
    if (!article) return;
    linkFigures(article);
    watchScrolling(article);
    const again = () => watchScrolling(article);
    window.addEventListener("load", again);  // images and the theme's wrappers of tables
    document.fonts.ready.then(again);  // the code font changes the width of every line
    article.addEventListener("toggle", again, true);  // a hidden cell opened
  };
  // As soon as the page is parsed, not at DOMContentLoaded, which waits for the deferred scripts (MathJax
  // from its CDN): the cue must not wait for the formulas.
  if (document.readyState === "loading") {
    document.addEventListener("readystatechange", start, { once: true });
  } else {
    start();
  }
})();
