print("resumable")
