print("h3get")
