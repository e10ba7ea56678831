print("quic-echo")
