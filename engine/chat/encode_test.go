package chat
