// Draws every chart of the report from the figures embedded in the page (no network access).
(function () {
  var figures = JSON.parse(document.getElementById("figures").textContent);
  var config = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["sendDataToCloud"] };
  figures.forEach(function (figure, index) {
    var element = document.getElementById("chart-" + index);
    if (element) { Plotly.newPlot(element, figure.data, figure.layout, config); }
  });
})();
