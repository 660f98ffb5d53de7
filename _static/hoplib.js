/* The book's two helps for narrow screens (styled in hoplib.css).
   1. The scroll cue: every box of the article that scrolls sideways (a wide table, a long code line or output)
      is marked hoplib-more-right / hoplib-more-left while it holds more than it shows on that side, and the
      stylesheet fades that edge. The marks follow the reader's scrolling and any change of the box's size
      (a turned phone, a hidden cell opened).
   2. Figures open at full size: each image of a figure or a cell's output becomes a link to the image file. */
(() => {
  const mark = (box) => {
    const more = box.scrollWidth - box.clientWidth;
    const overflows = box.clientWidth > 0 && more > 1;
    box.classList.toggle("hoplib-more-left", overflows && box.scrollLeft > 1);
    box.classList.toggle("hoplib-more-right", overflows && box.scrollLeft < more - 1);
  };

  const watchScrolling = (article) => {
    const boxes = [...article.querySelectorAll("*")].filter(
      (el) => ["auto", "scroll"].includes(getComputedStyle(el).overflowX));
    const resized = new ResizeObserver((entries) => entries.forEach((e) => mark(e.target)));
    for (const box of boxes) {
      box.addEventListener("scroll", () => mark(box), { passive: true });
      resized.observe(box);
      mark(box);
    }
    window.addEventListener("load", () => boxes.forEach(mark));  // images change the widths as they arrive
  };

  const linkFigures = (article) => {
    for (const img of article.querySelectorAll("figure img, div.cell_output img")) {
      if (img.closest("a")) continue;
      const link = document.createElement("a");
      link.className = "hoplib-zoom";
      link.href = img.currentSrc || img.src;
      link.title = "Open the figure at full size";
      img.replaceWith(link);
      link.appendChild(img);
    }
  };

  const start = () => {
    const article = document.querySelector(".bd-article");
    if (!article) return;
    linkFigures(article);
    watchScrolling(article);
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
