// H3 arrives with the HTTP/3 issue.
