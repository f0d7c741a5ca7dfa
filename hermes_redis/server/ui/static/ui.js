// The console's only script (issue 44: no inline handlers, so the policy can be
// default-src 'self'): a form with data-confirm asks before it submits.
document.addEventListener("submit", function (event) {
  var message = event.target.getAttribute("data-confirm");
  if (message && !window.confirm(message)) event.preventDefault();
});
